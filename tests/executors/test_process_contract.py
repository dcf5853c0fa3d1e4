"""The contract every process executor keeps, run against the local and the prefork one."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.executors.base import LaunchSpec
from runyard.executors.local import LocalExecutor
from runyard.executors.pidwatch import open_pidfd
from runyard.executors.prefork import PreforkExecutor

HERE = Path(__file__).parent
PY = sys.executable
BASE_ENV = {"PYTHONPATH": str(HERE)}


@pytest.fixture(params=["local", "prefork"])
def executor(request: pytest.FixtureRequest) -> Iterator[LocalExecutor | PreforkExecutor]:
    if request.param == "local":
        yield LocalExecutor()
        return
    env = {"PATH": os.environ.get("PATH", ""), **BASE_ENV}
    prefork = PreforkExecutor(PY, ["json", "prefork_probe"], env)
    prefork.start()
    yield prefork
    prefork.close()


def probe(tmp_path: Path, request: dict, **extra: object) -> LaunchSpec:
    values: dict[str, object] = {
        "argv": [PY, "-m", "prefork_probe"], "log_path": tmp_path / "logs" / "probe.log",
        "stdin": json.dumps(request).encode(), "env": {"ONLY": "this", **BASE_ENV},
    }
    values.update(extra)
    return LaunchSpec(**values)  # type: ignore[arg-type]


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "logs" / "probe.log").read_text()


def wait_for_line(tmp_path: Path, text: str) -> None:
    """Wait for ``text`` in the log, which the launched child may not have opened yet."""
    deadline = time.monotonic() + 10
    log = tmp_path / "logs" / "probe.log"
    while not log.exists() or text not in log.read_text():
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log yet"
        time.sleep(0.01)


def test_own_session_env_cwd_stdin_and_appended_log(executor, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "probe.log").write_text("earlier\n")
    handle = executor.launch(probe(tmp_path, {"data": "the input"}, cwd=tmp_path))

    assert executor.wait_exit(handle, 10).exit_code == 0
    executor.cleanup(handle)
    first, line = log_of(tmp_path).splitlines()
    report = json.loads(line)
    report["env"].pop("LC_CTYPE", None)  # an interpreter may set it for itself
    assert first == "earlier"
    assert report["env"] == {"ONLY": "this", **BASE_ENV} and report["cwd"] == str(tmp_path)
    assert report["stdin"] == "the input"
    assert report["pid"] == report["pgid"] == report["sid"] == handle.pid != os.getsid(0)


@pytest.mark.parametrize(("request_", "code"), [
    ({"code": 5}, 5), ({"action": "exit", "code": 3}, 3), ({"action": "exit", "code": "x"}, 1),
])
def test_exit_codes(executor, tmp_path, request_, code):
    handle = executor.launch(probe(tmp_path, request_))
    info = executor.wait_exit(handle, 10)
    assert info.exit_code == code and info.describe() == f"exit code {code}"
    assert executor.poll(handle).exit_code == code


def test_cancel_sends_sigterm_to_the_group(executor, tmp_path):
    handle = executor.launch(probe(tmp_path, {"action": "sleep"}))
    wait_for_line(tmp_path, "ready")
    assert executor.poll(handle) is None
    executor.cancel(handle, grace_seconds=5)
    info = executor.wait_exit(handle, 10)
    assert info.exit_code == -signal.SIGTERM and info.describe() == "killed by signal 15"


def test_cancel_kills_after_the_grace_when_sigterm_is_ignored(executor, tmp_path):
    handle = executor.launch(probe(tmp_path, {"action": "sleep", "ignore_term": True}))
    wait_for_line(tmp_path, "ready")
    started = time.monotonic()
    executor.cancel(handle, grace_seconds=0.3)
    assert executor.wait_exit(handle, 10).exit_code == -signal.SIGKILL
    assert 0.3 <= time.monotonic() - started < 5


def test_stragglers_of_a_finished_launch_are_killed(executor, tmp_path):
    handle = executor.launch(probe(tmp_path, {"action": "straggler"}))
    assert executor.wait_exit(handle, 10).exit_code == 0
    pidfd = open_pidfd(int(log_of(tmp_path).split()[0]))
    if pidfd is not None:  # still there a moment ago: it must be on its way out
        try:
            assert select.select([pidfd], [], [], 5)[0]
        finally:
            os.close(pidfd)
