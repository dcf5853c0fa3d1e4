"""The local executor with real processes."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from runyard.errors import ExecutorError
from runyard.executors.base import LaunchSpec, Limits
from runyard.executors.local import LocalExecutor, open_pidfd

PY = sys.executable


def spec(tmp_path: Path, code: str, **extra: object) -> LaunchSpec:
    values: dict[str, object] = {"argv": [PY, "-c", code], "log_path": tmp_path / "logs" / "x.log"}
    values.update(extra)
    return LaunchSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
def executor():
    return LocalExecutor()


def test_output_goes_to_the_log_appending(executor, tmp_path):
    log = tmp_path / "logs" / "x.log"
    log.parent.mkdir()
    log.write_text("earlier\n")
    code = "import sys; print('out', flush=True); print('err', file=sys.stderr)"
    handle = executor.launch(spec(tmp_path, code))

    info = executor.wait_exit(handle, 10)
    executor.cleanup(handle)

    assert info is not None and info.exit_code == 0 and info.describe() == "exit code 0"
    assert log.read_text().splitlines() == ["earlier", "out", "err"]


def test_env_cwd_and_stdin_are_exactly_what_the_spec_says(executor, tmp_path, monkeypatch):
    monkeypatch.setenv("PARENT_ONLY", "1")
    code = ("import os, sys, json; print(json.dumps([dict(os.environ), os.getcwd(),"
            " sys.stdin.read()]))")
    handle = executor.launch(spec(tmp_path, code, env={"ONLY": "this"}, cwd=tmp_path,
                                  stdin=b"payload bytes"))
    assert executor.wait_exit(handle, 10).exit_code == 0

    env, cwd, stdin = json.loads((tmp_path / "logs" / "x.log").read_text())
    env.pop("LC_CTYPE", None)  # the interpreter may set it for itself
    assert env == {"ONLY": "this"}
    assert cwd == str(tmp_path) and stdin == "payload bytes"


def test_own_process_group_and_exit_codes(executor, tmp_path):
    handle = executor.launch(spec(tmp_path, "import time; time.sleep(30)"))
    try:
        assert os.getpgid(handle.pid) == handle.pid != os.getpgid(0)
        assert executor.poll(handle) is None
    finally:
        executor.cancel(handle, grace_seconds=2)
    info = executor.wait_exit(handle, 10)
    assert info.exit_code == -signal.SIGTERM and info.signal == signal.SIGTERM
    assert info.describe() == "killed by signal 15"

    failing = executor.launch(spec(tmp_path, "raise SystemExit(4)"))
    assert executor.wait_exit(failing, 10).exit_code == 4


def test_cancel_kills_after_the_grace_when_sigterm_is_ignored(executor, tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            " print('ready', flush=True); time.sleep(30)")
    handle = executor.launch(spec(tmp_path, code))
    log = tmp_path / "logs" / "x.log"
    deadline = time.monotonic() + 10
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)

    started = time.monotonic()
    executor.cancel(handle, grace_seconds=0.3)
    assert executor.wait_exit(handle, 10).exit_code == -signal.SIGKILL
    assert 0.3 <= time.monotonic() - started < 5


def test_stragglers_of_a_finished_launch_are_killed(executor, tmp_path):
    code = "import subprocess; p = subprocess.Popen(['sleep', '30']); print(p.pid, flush=True)"
    handle = executor.launch(spec(tmp_path, code, env={"PATH": os.environ["PATH"]}))
    assert executor.wait_exit(handle, 10).exit_code == 0
    straggler = int((tmp_path / "logs" / "x.log").read_text().split()[0])
    pidfd = open_pidfd(straggler)
    if pidfd is not None:  # it may already be gone; if not, it must die now
        try:
            assert select.select([pidfd], [], [], 5)[0]
        finally:
            os.close(pidfd)


def test_memory_limit_is_applied(executor, tmp_path):
    code = "bytearray(512 * 1024 * 1024)"
    handle = executor.launch(spec(tmp_path, code, limits=Limits(memory_bytes=256 * 1024 * 1024)))
    assert executor.wait_exit(handle, 10).exit_code == 1
    assert "MemoryError" in (tmp_path / "logs" / "x.log").read_text()


def test_launch_errors_are_executor_errors(executor, tmp_path):
    with pytest.raises(ExecutorError, match="argv is empty"):
        executor.launch(LaunchSpec(argv=[], log_path=tmp_path / "x.log"))
    with pytest.raises(ExecutorError, match="Cannot launch"):
        executor.launch(LaunchSpec(argv=[str(tmp_path / "missing")], log_path=tmp_path / "x.log"))
