"""Python source run in a fresh interpreter, contained as a task is (AxonX's ``python`` job).

    result = run_code("print(1 + 1)", timeout=30, settings=settings)
    result.answer()   # {"stdout": "2\\n", "stderr": "", "exit_code": 0, ...}

The code goes to ``sys.executable -u -`` on its stdin (the server's interpreter and its
installed packages), launched by :class:`runyard.executors.local.LocalExecutor` like a
task's worker: its own session and process group, a cgroup (or rlimits) with
``task_limits``, the environment a plain task gets (``task_env``), and a private
temporary folder as its working directory, removed afterwards. At ``timeout`` seconds
the launch is cancelled: its group and everything in its cgroup are killed.

Output is bounded: each of stdout and stderr is read up to :data:`MAX_OUTPUT_BYTES`
(``*_truncated`` says when there was more). The files they go to may not grow past a
little more than that (``ulimit -f``): a program that writes on regardless gets EFBIG
(Python ignores SIGXFSZ) instead of filling the disk.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.config import Settings
from runyard.executors.base import LaunchSpec
from runyard.executors.containment import to_limits
from runyard.executors.local import LocalExecutor
from runyard.runtime.environment import task_environment

MAX_OUTPUT_BYTES = 1 << 20
FILE_LIMIT_BLOCKS = (MAX_OUTPUT_BYTES + (64 << 10)) // 512  # ulimit -f counts 512-byte blocks
KILL_GRACE_SECONDS = 0.5
# $0 the interpreter, $1 the stderr file, $2 the file size limit; stdout is the launch's log
WRAPPER = 'trap "" XFSZ; ulimit -f "$2" || exit 125; exec "$0" -u - 2>"$1"'


@dataclass(frozen=True)
class PythonResult:
    stdout: bytes
    stderr: bytes
    exit_code: int | None  # None: killed at its timeout
    stdout_truncated: bool
    stderr_truncated: bool
    timeout: float
    limits: dict[str, Any]

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    def answer(self) -> dict[str, Any]:
        """AxonX's ``PythonOutput``: a timeout is said at the end of stderr, as AxonX does."""
        stderr = self.stderr.decode(errors="replace")
        if self.exit_code is None:
            message = f"Python execution timed out after {self.timeout:g} seconds"
            stderr = f"{stderr}\n{message}" if stderr else message
        return {
            "stdout": self.stdout.decode(errors="replace"),
            "stderr": stderr,
            "exit_code": self.exit_code,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
        }


def run_code(code: str, timeout: float, settings: Settings) -> PythonResult:
    """Run ``code`` to its end or its ``timeout`` (seconds), in the calling thread."""
    executor = LocalExecutor()
    with tempfile.TemporaryDirectory(prefix="runyard-python-") as folder:
        out, err = Path(folder) / ".stdout", Path(folder) / ".stderr"
        spec = LaunchSpec(
            argv=["/bin/sh", "-c", WRAPPER, sys.executable, str(err), str(FILE_LIMIT_BLOCKS)],
            log_path=out, cwd=Path(folder), env=task_environment(settings),
            stdin=code.encode(), labels={"runyard.python": uuid.uuid4().hex},
            limits=to_limits(settings.task_limits, timeout),
        )  # fmt: skip
        handle = executor.launch(spec)
        info = None
        try:
            info = executor.wait_exit(handle, timeout)
        finally:
            if info is None:  # its time is up (or this thread was interrupted): kill it all
                executor.cancel(handle, KILL_GRACE_SECONDS)
            executor.cleanup(handle)
        stdout, out_cut = _bounded(out)
        stderr, err_cut = _bounded(err)
    code_ = None if info is None else info.exit_code
    report = handle.data.get("limits", {})
    return PythonResult(stdout, stderr, code_, out_cut, err_cut, timeout, report)


def _bounded(path: Path) -> tuple[bytes, bool]:
    """The first :data:`MAX_OUTPUT_BYTES` of ``path``, and whether it held more."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_OUTPUT_BYTES + 1)
    except FileNotFoundError:
        return b"", False
    return data[:MAX_OUTPUT_BYTES], len(data) > MAX_OUTPUT_BYTES
