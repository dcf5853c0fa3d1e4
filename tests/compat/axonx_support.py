"""The real AxonX 0.2.2 CLI and client, driven from the tests: the cached venv (Python 3.12,
built on first use under a lock) and :class:`AxonX`, one long-lived driver process
(``axonx_driver.py``) that runs the CLI's ``main`` and the client's calls.

Importing this module skips the importing test module where no Python 3.12 is found."""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from serverproc import ServerProcess

AXONX_VERSION = "0.2.2"
CACHE = Path.home() / ".cache" / "runyard-tests"
VENV = CACHE / f"axonx-{AXONX_VERSION}-cli-venv"
UNUSED = {"claude-agent-sdk"}  # AxonX's agent runner only: not imported by its CLI or client
DRIVER = Path(__file__).with_name("axonx_driver.py")
def find_python312() -> str | None:
    """A Python 3.12 that runs: on PATH, else in pyenv's versions (a pyenv shim on PATH
    may exist and still refuse to run when 3.12 is not the selected version)."""
    candidates = [shutil.which("python3.12")]
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        reply = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        roots.insert(0, reply.stdout.strip())
    for root in filter(None, roots):
        candidates += sorted(glob.glob(f"{root}/versions/3.12*/bin/python3.12"), reverse=True)
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


PYTHON312 = find_python312()
if PYTHON312 is None:
    pytest.skip(
        "AxonX 0.2.2 needs Python 3.12: none found (python3.12 on PATH or pyenv versions)",
        allow_module_level=True,
    )


def axonx_venv() -> Path:
    """The cached venv with axonx==0.2.2, built on first use. A venv's scripts name its
    interpreter by absolute path, so it is built in place, under a lock, and marked ready
    last: a half-built one is removed and built again."""
    if (VENV / ".ready").exists():
        return VENV
    assert PYTHON312 is not None
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"axonx-{AXONX_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (VENV / ".ready").exists():
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([PYTHON312, "-m", "venv", str(VENV)], check=True, timeout=300)
            pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, "--no-deps", f"axonx=={AXONX_VERSION}"], check=True, timeout=900)
            subprocess.run([*pip, *axonx_requirements()], check=True, timeout=900)
            (VENV / ".ready").write_text(AXONX_VERSION)
    return VENV


def axonx_requirements() -> list[str]:
    """The requirements axonx declares (no extras), less those in ``UNUSED``."""
    probe = (
        "import importlib.metadata as m; "
        "print('\\n'.join(r for r in m.requires('axonx') or [] if 'extra ==' not in r))"
    )
    python = str(VENV / "bin" / "python")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    wanted = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    kept = [r for r in wanted if r.split(">")[0].split("=")[0].split("<")[0].strip() not in UNUSED]
    assert len(kept) == len(wanted) - len(UNUSED), wanted  # the exclusion still names a real one
    return kept


class AxonX:
    """The AxonX CLI and client in one driver process, pointed at ``srv``."""

    def __init__(self, venv: Path, srv: ServerProcess, cwd: Path) -> None:
        self.venv, self.srv, self.cwd = venv, srv, cwd
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AXONX_", "PYTHON"))}
        self.env = env
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "python"), str(DRIVER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd, env=env,
        )  # fmt: skip

    @property
    def target(self) -> list[str]:
        return ["--target", self.srv.url, "--token", str(self.srv.token)]

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the AxonX driver exited"
        return json.loads(line)

    def cli(self, *argv: str) -> dict[str, Any]:
        """``axonx ARGV --target URL --token TOKEN``: ``{"rc", "out", "err"}``."""
        return self._ask({"cli": [*argv, *self.target]})

    def ok(self, *argv: str) -> Any:
        """A job run by the CLI that must succeed: its JobResponse."""
        reply = self.cli(*argv)
        assert reply["rc"] == 0, reply
        response = json.loads(reply["out"])
        assert response["success"] is True, response
        return response

    def stream(self, *argv: str) -> list[dict[str, Any]]:
        """``--stream true --stream-format json``: the events the CLI validated and printed."""
        reply = self.cli(*argv, "--stream", "true", "--stream-format", "json")
        assert reply["err"] == "", reply
        return [json.loads(line) for line in reply["out"].splitlines()]

    def client(self, op: str, **request: Any) -> Any:
        reply = self._ask(
            {"client": op, "target": self.srv.url, "token": self.srv.token, **request}
        )
        assert "ok" in reply, reply
        return reply["ok"]

    def peer(self, op: str, **request: Any) -> Any:
        """An AxonX peer's own code (``make_task``, ``sync_push``: see axonx_driver.py)."""
        reply = self._ask({"peer": op, **request})
        assert "ok" in reply, reply
        return reply["ok"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
