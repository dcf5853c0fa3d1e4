"""Plain local processes: one process group per launch, output appended to its log file.

    executor = LocalExecutor()
    handle = executor.launch(LaunchSpec(argv=["/bin/echo", "hi"], log_path=Path("run.log")))
    info = executor.wait_exit(handle, timeout=5.0)   # ExitInfo(exit_code=0)
    executor.cleanup(handle)

The process gets exactly ``spec.env``, runs in ``spec.cwd`` and starts a new session (so
it leads its own process group); stdout and stderr go to ``spec.log_path`` opened with
``O_APPEND``; ``spec.stdin`` is readable on its stdin and then EOF. ``mounts`` and
``network`` are not applied here: a plain process sees host paths (the sandbox executor
wraps this one with bubblewrap to apply them). ``limits`` (memory, pids, cpu) are
enforced by the launch's cgroup, else by setrlimit (:mod:`runyard.executors.containment`);
``timeout_seconds`` is left to the caller. The handle's ``data["limits"]`` reports what
was enforced and by what.

Where cgroups are usable every launch gets one (named from its run id), limited or not:
the process waits at a gate (a shell that stops itself before it ``exec``s the program)
until it is in its cgroup and its rlimits are set, so nothing of it ever runs outside.
When the group leader has exited, :meth:`LocalExecutor.poll` kills what is left of its
process group *before* reaping the leader (the zombie keeps the group id reserved, so the
signal cannot reach an unrelated group), then everything left in its cgroup — children
that left the group with ``setsid`` too: nothing outlives a finished launch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from runyard.errors import ExecutorError
from runyard.executors.base import ExitInfo, Handle, LaunchSpec
from runyard.executors.containment import Containment, Setup, cgroup_name
from runyard.executors.pidwatch import Watched, wait_exit, watching

log = logging.getLogger(__name__)


class _Process(subprocess.Popen[bytes]):
    """A child that may outlive the object: a later supervisor adopts and settles it."""

    def __del__(self) -> None:  # no ResourceWarning and no reaping behind the adopter's back
        return


def open_log(path: Path | str) -> int:
    """An append-only fd on ``path`` (parents created when missing), shared by stdout and
    stderr. The folder is made only when the open finds it missing: every forked worker
    opens its log, and all but the first of a folder would make it in vain."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, flags, 0o644)


def stdin_fd(data: bytes) -> int:
    """A readable fd positioned at the start of ``data`` (memfd, else an unlinked temp file)."""
    try:
        fd = os.memfd_create("runyard-stdin", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as tmp:
            fd = os.dup(tmp.fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        raise ExecutorError(f"Not allowed to signal process group {pgid}") from exc
    return True


def terminate_group(
    pid: int, grace_seconds: float, start_time: int | None = None, *, lone: bool = False
) -> bool:
    """SIGTERM the group led by ``pid``, SIGKILL it after ``grace_seconds``.

    ``start_time`` guards against PID reuse. Returns False when there was nothing to signal.
    With ``lone``, a ``pid`` that leads no group yet is signalled alone (through the pidfd
    held here): a pre-forked worker, forked by the launcher, between its fork and its
    ``setsid`` (it has not read its request), which would otherwise get no SIGTERM and no
    grace. Only for a pid the caller launched: never one read from a lock file.
    """
    with watching(pid, start_time) as proc:  # held open: the pid cannot be recycled meanwhile
        if proc is None or not _signal(pid, proc, signal.SIGTERM, lone):
            return False
        if not proc.wait(grace_seconds):
            _signal(pid, proc, signal.SIGKILL, lone)
            proc.wait(5.0)
    return True


def _signal(pid: int, proc: Watched, sig: int, lone: bool) -> bool:
    if signal_group(pid, sig):
        return True
    if not lone:
        return False
    try:
        signal.pidfd_send_signal(proc.pidfd, sig)  # the very process watched, not a new one
    except ProcessLookupError:
        return False
    return True


# Wait, stopped, until contained; then run. The shell's own PWD must not leak into the
# exactly-given environment: $1 says whether the spec had one, $2 is its value.
GATE = (
    'kill -STOP "$$" || exit 125; '
    'if [ "$1" = keep ]; then PWD=$2; export PWD; else unset PWD; fi; shift 2; exec "$@"'
)
GATE_TIMEOUT = 10.0


class LocalExecutor:
    """Launch each worker as a plain process in its own process group (and cgroup)."""

    name = "local"

    def __init__(self, containment: Containment | None = None) -> None:
        self.containment = containment or Containment.detect()

    def launch(self, spec: LaunchSpec) -> Handle:
        if not spec.argv:
            raise ExecutorError("Nothing to launch: argv is empty")
        setup = self.containment.prepare(cgroup_name(spec.labels), spec.limits)
        try:
            proc = self._spawn(spec, gated=setup.needed)
        except ExecutorError:
            setup.end()
            raise
        if setup.needed:
            self._contain(proc, setup)
        data = {"process": proc, "containment": setup, "limits": setup.report}
        return Handle(id=f"local-{proc.pid}", pid=proc.pid, labels=dict(spec.labels), data=data)

    @staticmethod
    def _contain(proc: _Process, setup: Setup) -> None:
        """Join the process (stopped at its gate) to its cgroup and rlimits, then let it go."""
        try:
            wait_stopped(proc.pid, GATE_TIMEOUT)
            setup.join(proc.pid)
        except ExecutorError:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            setup.end()
            raise
        os.kill(proc.pid, signal.SIGCONT)

    def _spawn(self, spec: LaunchSpec, gated: bool = False) -> _Process:
        try:
            log_fd = open_log(spec.log_path)
        except OSError as exc:
            raise ExecutorError(f"Cannot open log file {spec.log_path}: {exc}") from exc
        in_fd = stdin_fd(spec.stdin) if spec.stdin else subprocess.DEVNULL
        argv = list(spec.argv)
        if gated:
            pwd = ["keep", spec.env["PWD"]] if "PWD" in spec.env else ["drop", ""]
            argv = ["/bin/sh", "-c", GATE, "runyard-gate", *pwd, *argv]
        if gated and not _runnable(spec):
            _close(log_fd, in_fd)  # the gate's exec would fail later, and less clearly
            raise ExecutorError(f"Cannot launch {spec.argv[0]!r}: no such program")
        try:
            return _Process(
                argv, stdin=in_fd, stdout=log_fd, stderr=log_fd,
                cwd=spec.cwd, env=dict(spec.env), start_new_session=True, close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise ExecutorError(f"Cannot launch {spec.argv[0]!r}: {exc}") from exc
        finally:
            _close(log_fd, in_fd)

    def poll(self, handle: Handle) -> ExitInfo | None:
        proc = _process(handle)
        if proc.returncode is None and _exited_unreaped(proc.pid):
            signal_group(proc.pid, signal.SIGKILL)  # stragglers; the zombie holds the pgid
            end_containment(handle)
        code = proc.poll()
        if code is not None:
            end_containment(handle)
        return None if code is None else ExitInfo(code)

    def wait_exit(self, handle: Handle, timeout: float | None = None) -> ExitInfo | None:
        """The exit of ``handle`` within ``timeout`` seconds, else None."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pid = _process(handle).pid
        ended = False
        while (info := self.poll(handle)) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if ended:  # said ended but not reapable yet (no pidfd could be opened): no spin
                time.sleep(0.005)
            ended = wait_exit(pid, left)
        return info

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None:
        """SIGTERM the group, SIGKILL it after ``grace_seconds``, then kill its cgroup."""
        proc = _process(handle)
        if proc.returncode is None:
            terminate_group(proc.pid, grace_seconds)
        end_containment(handle)

    def cleanup(self, handle: Handle) -> None:
        """Reap the process if it has exited; a running one is left alone."""
        proc = handle.data.get("process")
        if isinstance(proc, _Process) and proc.returncode is None:
            self.poll(handle)

    def close(self) -> None:
        """Nothing to release: launched processes are independent of the executor."""


def end_containment(handle: Handle) -> None:
    """Kill what is left in the launch's cgroup and remove it (once it is empty)."""
    setup = handle.data.get("containment")
    if isinstance(setup, Setup) and not setup.end():
        log.warning("Processes of %s survive in its cgroup %s", handle.id, setup.report["cgroup"])


def wait_stopped(pid: int, timeout: float) -> None:
    """Wait until our child ``pid`` has stopped itself; ExecutorError if it exits instead."""
    deadline = time.monotonic() + timeout
    pause = 0.0002
    while True:
        flags = os.WSTOPPED | os.WEXITED | os.WNOHANG | os.WNOWAIT
        info = os.waitid(os.P_PID, pid, flags)
        if info is not None and info.si_pid == pid:
            if info.si_code == os.CLD_STOPPED:
                return
            raise ExecutorError(f"Process {pid} ended before it could be contained")
        if time.monotonic() > deadline:
            raise ExecutorError(f"Process {pid} did not reach its gate in {timeout} s")
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _runnable(spec: LaunchSpec) -> bool:
    program = spec.argv[0]
    if "/" in program:
        path = Path(program) if os.path.isabs(program) else Path(spec.cwd or ".") / program
        return path.is_file() and os.access(path, os.X_OK)
    search = os.pathsep.join(os.get_exec_path(dict(spec.env)))
    return shutil.which(program, path=search) is not None


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def _process(handle: Handle) -> _Process:
    proc = handle.data.get("process")
    if not isinstance(proc, _Process):
        raise ExecutorError(f"Handle {handle.id} was not launched by the local executor")
    return proc


def _exited_unreaped(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return info is not None
    return False
