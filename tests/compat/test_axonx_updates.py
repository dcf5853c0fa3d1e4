"""AxonX 0.2.2's ``python``, ``get_update_status``, ``update_from_pip``, ``update_from_git``
and ``restart_service`` against real runyard servers, by the real AxonX CLI and over HTTP.

Off by default: every job but ``get_update_status`` is refused naming its setting. On:
``python`` runs under the task limits (a memory limit holds, a timeout kills the code and
what it started), ``update_from_pip`` installs a throwaway wheel into a throwaway venv's
server (never the test venv), ``restart_service`` re-execs the server (same pid, a new
start) while a task runs, and the task finishes. A run token is refused each of them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess, start_server, until

sys.path.insert(0, str(Path(__file__).parents[1] / "tasks"))
sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from plugin_dist import layered_venv  # noqa: E402

UPDATE_JOBS = ("update_from_pip", "update_from_git", "restart_service")
PYTHON_OUTPUT = "axonx.steps.machine.contracts.PythonOutput"
DUMMY = "runyard_dummy_update"

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with python and updates off (their defaults). It runs in a throwaway venv
    with a throwaway requirement: an update let through by mistake installs nothing that
    matters, nowhere that matters."""
    tmp = tmp_path_factory.mktemp("axonx-updates-off")
    python = layered_venv(tmp / "venv")
    config = {"self_update_requirement": str(dummy_wheel(tmp / "dist"))}
    proc = start_server(tmp / "srv", python=str(python), config=config)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def axonx(srv: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), srv, tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


class Site:
    def __init__(self, python: Path, server: ServerProcess, wheel: Path) -> None:
        self.python, self.server, self.wheel = python, server, wheel

    @staticmethod
    def has(distribution: str, python: Path | str) -> bool:
        probe = "import sys, importlib.metadata as m; m.distribution(sys.argv[1])"
        done = subprocess.run([str(python), "-c", probe, distribution], timeout=60)
        return done.returncode == 0


@pytest.fixture(scope="module")
def on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server in a throwaway venv with python and updates on, 100 MiB per launch."""
    from agent_support import PACKAGES

    tmp = tmp_path_factory.mktemp("axonx-updates-on")
    python = layered_venv(tmp / "venv")
    wheel = dummy_wheel(tmp / "dist")
    config = {
        "allow_python_job": True,
        "allow_self_update": True,
        "self_update_requirement": str(wheel),
        "task_limits": {"memory_mb": 100},
        "agent_packages_dir": str(PACKAGES),  # for a run token
        "agent_sandbox": "none",
    }
    server = start_server(tmp / "srv", python=str(python), config=config)
    try:
        yield Site(python, server, wheel)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def axonx_on(on: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), on.server, tmp_path_factory.mktemp("axonx-cwd-on"))
    try:
        yield driver
    finally:
        driver.close()


def dummy_wheel(folder: Path) -> Path:
    """A wheel of one module, built by hand: pip installs it with no index and no build."""
    folder.mkdir(parents=True)
    info = f"{DUMMY}-1.0.dist-info"
    files = {
        f"{DUMMY}.py": b"VALUE = 46\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DUMMY}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / f"{DUMMY}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def validates(model: str, value: Any) -> None:
    """``value`` validates against AxonX's pydantic ``model`` (``module.Name``) in its venv."""
    script = (
        "import importlib, json, sys\n"
        "module, _, name = sys.argv[1].rpartition('.')\n"
        "getattr(importlib.import_module(module), name).model_validate(json.load(sys.stdin))\n"
    )
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", script, model],
        input=json.dumps(value), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def job(server: ServerProcess, name: str, headers: dict[str, str] | None = None, **args: Any):
    with httpx.Client(base_url=server.url, headers=headers or server.headers, timeout=120) as c:
        return c.post(f"/jobs/{name}", json={"arguments": args})


def refusal(reply: httpx.Response) -> str:
    assert reply.status_code == 403, reply.text
    return json.dumps(reply.json())


# ---- off by default ----------------------------------------------------------------------


def test_every_job_is_refused_naming_its_setting_while_off(srv: ServerProcess) -> None:
    assert "allow_python_job" in refusal(job(srv, "python", code="open('x', 'w')"))
    for name in UPDATE_JOBS:
        assert "allow_self_update" in refusal(job(srv, name)), name
        assert "allow_self_update" in refusal(job(srv, name, force=True)), name
    assert not (srv.root / "x").exists() and not (srv.workspace / ".runyard" / "updates").exists()
    assert not Site.has(DUMMY, srv.root.parent / "venv" / "bin" / "python")
    assert job(srv, "version").json()["answer"]  # still serving: no restart was made


def test_the_axonx_cli_is_refused_with_the_setting_named(axonx: AxonX) -> None:
    reply = axonx.cli("python", "--code", json.dumps("print(46)"))
    assert reply["rc"] != 0 and "allow_python_job" in reply["out"] + reply["err"], reply
    reply = axonx.cli("restart_service")
    assert reply["rc"] != 0 and "allow_self_update" in reply["out"] + reply["err"], reply


def test_get_update_status_says_the_installed_version_and_its_source(axonx: AxonX) -> None:
    from importlib.metadata import distribution

    answer = axonx.ok("get_update_status")["answer"]
    assert answer["record"] is None and answer["log"] == "" and answer["restart_blockers"] == []
    dist = distribution("runyard")  # the test venv's runyard: an editable checkout
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    assert direct["dir_info"]["editable"] is True
    assert answer["installed"]["version"] == dist.version
    assert answer["installed"]["source"] == "editable"
    assert answer["installed"]["url"] == direct["url"]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("python", {}),
        ("python", {"code": ""}),
        ("python", {"code": "print(1)", "timeout": 0}),
        ("python", {"code": "print(1)", "timeout": 301}),
        ("python", {"code": "print(1)", "timeout": "5"}),
        ("python", {"code": "print(1)", "timeout": True}),
        ("python", {"code": 1}),
        ("python", {"code": "print(1)", "cwd": "/"}),
        ("get_update_status", {"update_id": "../../server"}),
        ("get_update_status", {"update_id": "A" * 32}),
        ("update_from_pip", {"requirement": "evil"}),
        ("update_from_git", {"force": "yes"}),
        ("update_from_pip", {"force": 1}),
        ("restart_service", {"argv": ["sh"]}),
    ],
)
def test_bad_arguments_are_422(srv: ServerProcess, name: str, args: dict[str, Any]) -> None:
    reply = job(srv, name, **args)
    assert reply.status_code == 422, reply.text


# ---- python on ---------------------------------------------------------------------------


def test_python_output_is_returned_in_axonx_shape(axonx_on: AxonX) -> None:
    code = "import os, sys\nprint('out', 6 * 7)\nprint('err', file=sys.stderr)\nprint(os.getcwd())"
    response = axonx_on.ok("python", "--code", json.dumps(code), "--timeout", "20")
    answer = response["answer"]
    validates(PYTHON_OUTPUT, answer)
    assert answer["stdout"].startswith("out 42\n") and answer["stderr"] == "err\n"
    assert answer["exit_code"] == 0 and not answer["stdout_truncated"]
    assert "runyard-python-" in answer["stdout"]  # a fresh, private folder, not the server's
    assert response["metadata"]["limits"]["memory_mb"] == 100


def test_python_failure_and_bounded_output(on: Site) -> None:
    reply = job(on.server, "python", code="raise SystemExit(3)").json()
    assert reply["success"] is False and reply["answer"]["exit_code"] == 3
    flood = (
        "import sys\nwritten = 0\ntry:\n    while True:\n"
        "        sys.stdout.write('x' * 65536)\n        written += 65536\n"
        "except OSError as exc:\n    print('wrote', written, exc, file=sys.stderr)\n"
        "    raise SystemExit(1)\n"
    )
    reply = job(on.server, "python", code=flood, timeout=60).json()
    answer = reply["answer"]
    validates(PYTHON_OUTPUT, answer)
    assert reply["success"] is False and answer["stdout_truncated"] is True
    assert len(answer["stdout"]) == 1 << 20
    words = answer["stderr"].split()
    assert words[0] == "wrote" and "File too large" in answer["stderr"], answer["stderr"]
    assert int(words[1]) <= (1 << 20) + (64 << 10)  # the disk holds no more than that


def test_python_timeout_kills_the_code_and_what_it_started(on: Site, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(300)\n"
    )
    began = time.monotonic()
    reply = job(on.server, "python", code=code, timeout=2).json()
    assert time.monotonic() - began < 20
    answer = reply["answer"]
    validates(PYTHON_OUTPUT, answer)
    assert reply["success"] is False and answer["exit_code"] is None
    assert answer["stdout"] == "started\n"
    assert "timed out after 2 seconds" in answer["stderr"]
    child = int(pidfile.read_text())
    # it left the process group (setsid): its cgroup ended it all the same
    assert until(lambda: not _alive(child), timeout=10)


def test_python_memory_limit_holds(on: Site) -> None:
    code = "b = bytearray(1 << 30)\nprint('allocated', len(b))"
    reply = job(on.server, "python", code=code, timeout=60).json()
    answer = reply["answer"]
    assert reply["success"] is False and "allocated" not in answer["stdout"]
    assert answer["exit_code"] == -9 or "MemoryError" in answer["stderr"], answer


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ---- updates on --------------------------------------------------------------------------


def test_update_from_pip_installs_into_the_servers_own_environment(
    on: Site, axonx_on: AxonX
) -> None:
    assert not on.has(DUMMY, on.python)
    answer = axonx_on.ok("update_from_pip")["answer"]
    assert answer["mode"] == "pip" and answer["phase"] == "succeeded", answer
    assert answer["error"] is None and answer["restart_required"] is True
    assert "-m pip install --upgrade --no-input" in answer["log"] and DUMMY in answer["log"]
    assert on.has(DUMMY, on.python)
    assert not on.has(DUMMY, sys.executable)  # the test venv is untouched
    status = axonx_on.ok("get_update_status", "--update_id", json.dumps(answer["update_id"]))
    assert status["answer"]["record"]["update_id"] == answer["update_id"]
    assert status["answer"]["log"] == answer["log"]
    latest = axonx_on.ok("get_update_status")["answer"]
    assert latest["record"]["phase"] == "succeeded"


def test_update_from_git_needs_its_requirement_named(on: Site) -> None:
    assert "self_update_git" in refusal(job(on.server, "update_from_git"))


def test_an_unknown_update_id_is_a_failed_answer(on: Site) -> None:
    reply = job(on.server, "get_update_status", update_id="0" * 32)
    assert reply.status_code == 200 and reply.json()["success"] is False
    assert "no such update" in json.dumps(reply.json())


def test_a_run_token_is_refused_every_job(on: Site) -> None:
    from api_helpers import api, create_run, new_session, wait_file, wait_run

    with api(on.server) as admin:
        session_id = new_session(admin)
        run = create_run(admin, session_id, "token\nwait-for go\nanswer done", package="probe")
        as_run = {"authorization": f"Bearer {wait_file(admin, run['id'], 'token').decode()}"}
        try:
            pidfile = on.server.root / "ran"
            code = f"open({str(pidfile)!r}, 'w').write('ran')"
            assert job(on.server, "python", as_run, code=code).status_code == 403
            for name in ("get_update_status", *UPDATE_JOBS):
                assert job(on.server, name, as_run).status_code == 403, name
            assert not pidfile.exists()
        finally:
            (on.server.workspace / "agent" / "session-state" / session_id / "go").touch()
            assert wait_run(admin, run["id"])["state"] == "succeeded"


# ---- restart -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_restart_service_re_execs_the_server_and_a_running_task_finishes(
    tmp_path: Path,
) -> None:
    port = free_port()
    server = start_server(
        tmp_path / "srv", config={"allow_self_update": True}, args=["--port", str(port)]
    )
    (tmp_path / "cwd").mkdir()
    driver = None
    try:
        driver = AxonX(axonx_venv(), server, tmp_path / "cwd")
        before = json.loads((server.workspace / "server.json").read_text())
        handle = server.call(
            "submit", task="command", command="sleep 4 && echo finished", shell=True
        )["answer"]
        until(lambda: server.call("status", task_id=handle["task_id"])["answer"]["state"]
              == "running")  # fmt: skip
        answer = driver.ok("restart_service")["answer"]
        assert answer["mode"] == "restart" and answer["phase"] == "accepted"
        try:  # a second restart, sent before the first one's stop begins (0.2 s later)
            again: httpx.Response | None = job(server, "restart_service")
        except httpx.TransportError:  # the stop had begun after all: nothing to check
            again = None
        if again is not None and again.status_code == 200:
            assert again.json()["success"] is False, again.text
            assert "A restart is already under way" in again.text
        else:
            assert again is None or again.status_code == 503, again.text

        def restarted() -> dict[str, Any] | None:
            try:
                now = json.loads((server.workspace / "server.json").read_text())
            except (OSError, ValueError):
                return None
            started = now.get("started_at")  # none while stopped: the token alone is kept
            return now if started not in (None, before["started_at"]) else None

        after = until(restarted, timeout=60)
        assert after["pid"] == before["pid"] == server.proc.pid and server.proc.poll() is None
        assert after["url"] == before["url"]
        until(lambda: sum("runyard serving" in line for line in server.output) == 2)
        until(lambda: httpx.get(server.url + "/health", timeout=2).status_code == 200)
        done = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
        assert done["success"] is True, done
        done = done["answer"]
        assert done["state"] == "succeeded", done
        log = server.call("read_task_log", task_id=handle["task_id"])["answer"]
        assert "finished" in json.dumps(log)
        status = driver.ok("get_update_status")["answer"]
        assert status["record"]["update_id"] == answer["update_id"]
        assert status["record"]["phase"] == "restarting"
    finally:
        if driver is not None:
            driver.close()
        server.stop()
