"""The local executor with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runyard.errors import ExecutorError
from runyard.executors.base import LaunchSpec, Limits
from runyard.executors.cgroups import detect_host
from runyard.executors.containment import Containment
from runyard.executors.local import LocalExecutor, terminate_group

PY = sys.executable


def spec(tmp_path: Path, code: str, **extra: object) -> LaunchSpec:
    values: dict[str, object] = {"argv": [PY, "-c", code], "log_path": tmp_path / "logs" / "x.log"}
    values.update(extra)
    return LaunchSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
def executor():
    return LocalExecutor()


def test_any_command_runs_with_exactly_its_env(executor, tmp_path):
    script = 'echo "$ONLY:${HOME:-no-home}:$(pwd)"; cat; exit 2'
    handle = executor.launch(LaunchSpec(
        argv=["/bin/sh", "-c", script], log_path=tmp_path / "logs" / "x.log",
        env={"ONLY": "this"}, cwd=tmp_path, stdin=b"from stdin\n",
    ))
    assert executor.wait_exit(handle, 10).exit_code == 2
    assert (tmp_path / "logs" / "x.log").read_text() == f"this:no-home:{tmp_path}\nfrom stdin\n"


def test_memory_limit_is_applied(executor, tmp_path):
    code = "bytearray(512 * 1024 * 1024)"
    handle = executor.launch(spec(tmp_path, code, limits=Limits(memory_bytes=256 * 1024 * 1024)))
    host = detect_host()  # cgroup v1 or v2, whichever this machine has
    memory = host.version if host is not None and "memory" in host.limitable else "rlimit"
    assert handle.data["limits"]["enforced_by"] == memory
    assert executor.wait_exit(handle, 10).exit_code == -9  # the cgroup's OOM killer


def test_memory_limit_without_cgroups_is_an_rlimit(tmp_path):
    executor = LocalExecutor(Containment(None))
    code = "bytearray(512 * 1024 * 1024)"
    handle = executor.launch(spec(tmp_path, code, limits=Limits(memory_bytes=256 * 1024 * 1024)))
    assert handle.data["limits"]["enforced_by"] == "rlimit"
    assert executor.wait_exit(handle, 10).exit_code == 1
    assert "MemoryError" in (tmp_path / "logs" / "x.log").read_text()


def test_launch_errors_are_executor_errors(executor, tmp_path):
    with pytest.raises(ExecutorError, match="argv is empty"):
        executor.launch(LaunchSpec(argv=[], log_path=tmp_path / "x.log"))
    with pytest.raises(ExecutorError, match="Cannot launch"):
        executor.launch(LaunchSpec(argv=[str(tmp_path / "missing")], log_path=tmp_path / "x.log"))


def test_a_process_leading_no_group_is_signalled_alone_only_when_asked() -> None:
    # a pre-forked worker leads its group once it has read its request; before that its
    # cancel must still reach it (lone=True), and a stranger's pid is never signalled
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert os.getpgid(child.pid) == os.getpgid(0) != child.pid  # in this test's group
        assert terminate_group(child.pid, 5) is False
        assert child.poll() is None
        assert terminate_group(child.pid, 5, lone=True) is True
        assert child.wait(10) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()
