"""The example plugin (``examples/hello-plugin``) installed with pip into a folder on the
PYTHONPATH of a server that is already running: its task is submitted and succeeds with
no restart, and unknown names still answer the seed's ``Unknown Task``.

The wheel pip installs is assembled here from the example's pyproject (name, version,
entry points) and its package folder: a PEP 517 build would first fetch the build backend
into an isolated environment, which takes longer than the rest of the test together.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

from runyard.tasks.registry import RESCAN_INTERVAL
from serverproc import start_server

EXAMPLE = Path(__file__).parents[2] / "examples" / "hello-plugin"


def build_wheel(out: Path) -> Path:
    """A pure-Python wheel of the example: its package, METADATA, entry points, RECORD."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    module = project["name"].replace("-", "_")
    info = f"{module}-{project['version']}.dist-info"
    points = "".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items())
        for group, entries in project["entry-points"].items()
    )
    files = {
        f"{module}/{path.name}": path.read_bytes()
        for path in sorted((EXAMPLE / "src" / module).glob("*.py"))
    }
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    ).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = points.encode()
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out / f"{module}-{project['version']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def pip_install(wheel: Path, target: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--disable-pip-version-check", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_plugin_installed_while_the_server_runs_is_used_without_restart(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    wheel = build_wheel(tmp_path)
    server = start_server(tmp_path / "srv", env={"PYTHONPATH": str(site)})
    try:
        before = server.call("submit", task="hello", who="runyard", times=2)
        assert before["success"] is False
        assert before["answer"].startswith("ValueError: Unknown Task: hello. Available: ")
        refused_at = time.monotonic()
        pid = server.proc.pid
        pip_install(wheel, site)
        # names are rescanned at most once per RESCAN_INTERVAL: a quick pip must not make the
        # next submit land inside the interval the refused one opened
        time.sleep(max(0.0, RESCAN_INTERVAL + 0.1 - (time.monotonic() - refused_at)))
        handle = server.call("submit", task="hello", task_name="hi", who="runyard", times=2)
        assert handle["success"] is True, handle
        task_id = handle["answer"]["task_id"]
        assert task_id == "base#hello#hi"
        final = server.call("wait_task", task_id=task_id, run_id=handle["answer"]["run_id"])
        status = final["answer"]
        assert status["state"] == "succeeded", status
        assert status["result"]["greeting"] == "Hello, runyard!" and status["result"]["lines"] == 2
        assert status["result"]["artifacts"]["greeting"]["path"] == "greeting.txt"
        text = (server.workspace / "base" / task_id / "greeting.txt").read_text()
        assert text == "Hello, runyard!\nHello, runyard!\n"
        definition = server.call("get_task_definition", task="hello")["answer"]
        assert definition["source"] == "plugin" and definition["plugin"] == "runyard-hello"
        assert server.proc.pid == pid and server.proc.poll() is None  # the same server
        missing = server.call("submit", task="hello-typo")
        assert missing["success"] is False
        assert missing["answer"].startswith(
        "ValueError: Unknown Task: hello-typo. Did you mean 'hello'? Available: "
    )
        assert "hello" in missing["answer"].split("Available: ", 1)[1].split(", ")
    finally:
        server.stop()
