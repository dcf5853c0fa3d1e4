"""A pre-forked launcher: a zygote process that already imported the worker's modules forks
each worker on request, so a worker starts in milliseconds instead of a fresh interpreter's
hundreds.

    executor = PreforkExecutor(sys.executable, preload=["runyard.runtime.worker"], env=env)
    executor.start()                       # optional: pay the zygote's start-up now
    handle = executor.launch(LaunchSpec(argv=[sys.executable, "-m", "runyard.runtime.worker"],
                                        log_path=log, env=env, stdin=payload, cwd=task_dir))
    executor.wait_exit(handle, timeout=30)
    executor.close()                       # the zygote exits; running workers carry on

A forked worker gets what :class:`LocalExecutor` gives a process: a new session (its own
process group), stdout and stderr appended to ``spec.log_path``, ``spec.stdin`` on stdin,
exactly ``spec.env``, ``spec.cwd``, its cgroup and limits (the child joins them before it
runs anything else; the launcher kills what is left in the cgroup when the worker has
ended). A launch without limits takes one of the zygote's *standbys* — children forked
ahead of time, each of which already joined a spare cgroup, which is renamed after the
run (cgroup v1 only: cgroup2 cannot rename one, so there are no standbys there) — so it
starts contained without a cgroup migration on its way; its
``/proc/<pid>/cmdline`` is the zygote's. :data:`STANDBYS` are kept ready, forked in
batches. A standby reports its pid when it is ready, so a launch on it returns without
waiting for the zygote to pass the request on; should the standby die first, the zygote
answers "failed" instead of forking another process in its place, and the standby's exit
is the run's. Only specs of the form
``[<this python>, "-m", <module>, *args]`` are forked (the module's ``main()`` is called,
else it is run as ``__main__``); anything else, and any zygote failure, falls back to
:class:`LocalExecutor`. The zygote reaps its children, kills what is left of a
finished worker's process group, and reports exit codes back over a socket. A forked
worker resolves imports with the zygote's ``sys.path`` (from ``env`` at its start), not
from ``PYTHONPATH`` in its own spec.

The zygote itself (:mod:`runyard.executors.zygote`) is single-threaded, so forking it is safe.
With ``warm="module:function"`` it calls that function once it has preloaded, before its
first fork (the server's runs :func:`runyard.runtime.warmup.warm_worker`); a failure is
reported in ``preload_errors`` and in its log, and a warm-up that leaves a thread makes the
zygote exit, so launches fall back to plain processes.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.base import ExitInfo, Handle, LaunchSpec, Limits
from runyard.executors.cgroups import Cgroup, CgroupHost
from runyard.executors.containment import Containment, Setup, cgroup_name
from runyard.executors.local import LocalExecutor, end_containment, terminate_group
from runyard.executors.pidwatch import is_alive, process_start_time, wait_exit

READY_TIMEOUT = 60.0
SPARE_PREFIX = "runyard-spare-"
STANDBYS = 8  # standbys kept ready; the rest of them is asked for when one is left
STALE_SPARE_SECONDS = 60.0  # an empty spare this old lost its standby (one joins in ms)
SPAWN_TIMEOUT = 10.0


class PreforkExecutor:
    """Fork workers from a warm zygote; fall back to plain processes when it cannot."""

    name = "prefork"

    def __init__(
        self,
        python: str,
        preload: list[str],
        env: dict[str, str],
        log_path: Path | None = None,
        containment: Containment | None = None,
        warm: str | None = None,
    ) -> None:
        self.python = python
        self.preload = list(preload)
        self.warm = warm  # "module:function" the zygote calls once it preloaded
        self.env = dict(env)
        self.log_path = log_path
        self.local = LocalExecutor(containment)
        self._zygote: ZygoteClient | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def containment(self) -> Containment:
        return self.local.containment

    def start(self) -> None:
        """Start the zygote now rather than at the first launch."""
        with self._lock:
            self._ensure_zygote()

    def launch(self, spec: LaunchSpec) -> Handle:
        module_args = self._forkable(spec)
        with self._lock:
            zygote = self._ensure_zygote() if module_args is not None else None
        if zygote is None or module_args is None:
            return self.local.launch(spec)
        name = cgroup_name(spec.labels)
        taken = zygote.take_standby(name, self.containment, spec.limits)
        setup, standby = taken or (self.containment.prepare(name, spec.limits), None)
        try:
            pid = zygote.spawn(module_args[0], module_args[1:], spec, setup, standby)
        except ExecutorError:
            setup.end()
            if zygote.alive:
                raise
            return self.local.launch(spec)
        zygote.refill(self.containment)
        data = {"zygote": zygote, "start_time": process_start_time(pid), "containment": setup,
                "limits": setup.report}  # fmt: skip
        return Handle(id=f"prefork-{pid}", pid=pid, labels=dict(spec.labels), data=data)

    def _forkable(self, spec: LaunchSpec) -> list[str] | None:
        argv = spec.argv
        if len(argv) < 3 or argv[1] != "-m":
            return None
        if argv[0] != self.python and os.path.realpath(argv[0]) != os.path.realpath(self.python):
            return None  # (the same path is the same file: no need to resolve it each launch)
        return list(argv[2:])

    def _ensure_zygote(self) -> ZygoteClient | None:
        if self._closed:
            return None
        if self._zygote is not None and self._zygote.alive:
            return self._zygote
        old, self._zygote = self._zygote, None
        if old is not None:
            old.close()
        sweep_spares(self.containment.host)
        try:
            self._zygote = ZygoteClient(
                self.python, self.preload, self.env, self.log_path, self.warm
            )
        except ExecutorError:
            self._closed = True  # a zygote that cannot start will not start next time either
        else:
            self._zygote.refill(self.containment)
        return self._zygote

    def poll(self, handle: Handle) -> ExitInfo | None:
        zygote = handle.data.get("zygote")
        if not isinstance(zygote, ZygoteClient):
            return self.local.poll(handle)
        code = zygote.exit_code(_pid(handle))
        if code is not None:
            end_containment(handle)
        return None if code is None else ExitInfo(code)

    def wait_exit(self, handle: Handle, timeout: float | None = None) -> ExitInfo | None:
        zygote = handle.data.get("zygote")
        if not isinstance(zygote, ZygoteClient):
            return self.local.wait_exit(handle, timeout)
        code = zygote.wait_exit(_pid(handle), timeout)
        if code is not None or _gone(handle):  # a dead zygote's children: the code is lost
            end_containment(handle)
        return None if code is None else ExitInfo(code)

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None:
        """SIGTERM the group, SIGKILL it after ``grace_seconds``, then kill its cgroup."""
        if not isinstance(handle.data.get("zygote"), ZygoteClient):
            self.local.cancel(handle, grace_seconds)
            return
        if self.poll(handle) is None:  # a standby may not have made its group yet
            pid, start_time = _pid(handle), handle.data.get("start_time")
            terminate_group(pid, grace_seconds, start_time, lone=True)
        end_containment(handle)

    def cleanup(self, handle: Handle) -> None:
        zygote = handle.data.get("zygote")
        if isinstance(zygote, ZygoteClient):
            if self.poll(handle) is not None:
                zygote.forget(_pid(handle))
        else:
            self.local.cleanup(handle)

    def close(self) -> None:
        """Stop the zygote; workers it forked keep running."""
        with self._lock:
            self._closed = True
            zygote, self._zygote = self._zygote, None
        if zygote is not None:
            zygote.close()


def sweep_spares(host: CgroupHost | None) -> int:
    """Remove the spare cgroups ended launchers left behind (a server killed with its
    standbys leaves their spares, empty); how many went. A live launcher's spare holds its
    standby, or was made less than :data:`STALE_SPARE_SECONDS` ago (the folder's mtime), so
    neither is touched, whichever server on this machine it belongs to. A spare named by a
    process of this pid namespace that has ended (:func:`_owner_tag`) goes at once: a
    server restarted right after a crash removes the spares of the one before."""
    if host is None:
        return 0
    cutoff = time.time() - STALE_SPARE_SECONDS
    removed = 0
    for base in host.bases.values():
        try:
            entries = [entry for entry in os.scandir(base) if entry.name.startswith(SPARE_PREFIX)]
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_mtime < cutoff or _owner_ended(
                    entry.name
                ):
                    os.rmdir(entry.path)  # refused while a process is inside
                    removed += 1
            except OSError:
                continue
    return removed


def _owner_tag() -> str:
    """``<pid namespace>-<pid>-<start time>`` of this process, which makes spare cgroups:
    once it has ended, its spares are known to be left behind. (A pid means nothing in
    another pid namespace, so the namespace is part of it; the start time tells a reused
    pid from its first owner.)"""
    pid = os.getpid()
    return f"{_pid_namespace()}-{pid}-{process_start_time(pid) or 0}"


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _owner_ended(name: str) -> bool:
    """Whether the spare ``name`` was made by a process of this pid namespace that has
    ended; False for a name without its maker (an older version's) or from another
    namespace."""
    parts = name[len(SPARE_PREFIX) :].split("-")
    if len(parts) != 4 or not all(part.isdigit() for part in parts[:3]):
        return False
    namespace, pid, start_time = (int(part) for part in parts[:3])
    if namespace == 0 or start_time == 0 or namespace != _pid_namespace():
        return False
    return not is_alive(pid, start_time)


def _gone(handle: Handle) -> bool:
    """Whether the worker has exited (reaped or not)."""
    return not is_alive(_pid(handle), handle.data.get("start_time"))


def _pid(handle: Handle) -> int:
    if handle.pid is None:
        raise ExecutorError(f"Handle {handle.id} has no process")
    return handle.pid


class ZygoteClient:
    """This side of one zygote: spawn requests, and the exit codes it reports."""

    def __init__(
        self,
        python: str,
        preload: list[str],
        env: dict[str, str],
        log_path: Path | None,
        warm: str | None = None,
    ) -> None:
        ours, theirs = socket.socketpair()
        self._sock = ours
        self._file = ours.makefile("rb")
        self._proc = self._start(python, theirs, env, log_path)
        theirs.close()
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._spares: dict[str, Cgroup] = {}  # by name: each has a standby, asked for or ready
        self._ready: list[str] = []  # the spares whose standby joined them, oldest first
        self._standby_pids: dict[str, int] = {}  # the ready standbys' processes, by spare
        self._unanswered: set[int] = set()  # spawns on a standby, whose answer nobody waits for
        self.alive = True
        self.preload_errors = self._handshake(preload, warm)
        self._reader = threading.Thread(target=self._read, name="prefork-reader", daemon=True)
        self._reader.start()

    @staticmethod
    def _start(
        python: str, theirs: socket.socket, env: dict[str, str], log_path: Path | None
    ) -> subprocess.Popen[bytes]:
        out: Any = subprocess.DEVNULL
        try:
            if log_path is not None:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                out = open(log_path, "ab")  # noqa: SIM115 - closed right after the spawn
            with contextlib.ExitStack() as stack:
                if out is not subprocess.DEVNULL:
                    stack.enter_context(out)
                return subprocess.Popen(
                    [python, "-m", "runyard.executors.zygote", str(theirs.fileno())],
                    pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                    stderr=out, env=env, start_new_session=True,
                )
        except OSError as exc:
            raise ExecutorError(f"Cannot start the prefork zygote: {exc}") from exc

    def _handshake(self, preload: list[str], warm: str | None) -> dict[str, str]:
        self._send({"op": "preload", "modules": preload, "warm": warm})
        self._sock.settimeout(READY_TIMEOUT)
        try:
            line = self._file.readline()
        except OSError as exc:
            self.close()
            raise ExecutorError(f"The prefork zygote did not start: {exc}") from exc
        finally:
            self._sock.settimeout(None)
        if not line:
            self.close()
            raise ExecutorError("The prefork zygote exited during start-up")
        errors: dict[str, str] = json.loads(line).get("errors", {})
        return errors

    def _send(self, message: dict[str, Any]) -> None:
        self._sock.sendall(json.dumps(message).encode() + b"\n")

    def spawn(
        self, module: str, args: list[str], spec: LaunchSpec, setup: Setup,
        standby: str | None = None,
    ) -> int:  # fmt: skip
        request_id = next(self._ids)
        with self._cond:
            taken = self._standby_pids.pop(standby, None) if standby is not None else None
            if taken is not None:
                self._unanswered.add(request_id)
        request = {
            "op": "spawn", "id": request_id, "standby": standby, "module": module, "args": args,
            "env": dict(spec.env), "cwd": str(spec.cwd) if spec.cwd else None,
            "log_path": str(spec.log_path), "stdin": base64.b64encode(spec.stdin).decode(),
            "cgroup_procs": setup.procs_files,
            "rlimits": setup.rlimits,
            "taken": taken is not None,
        }
        try:
            with self._send_lock:  # never under the condition: the reader must always read
                self._send(request)
        except OSError as exc:
            self.alive = False
            raise ExecutorError(f"The prefork zygote is gone: {exc}") from exc
        if taken is not None:
            # the standby is the run's process: its pid is known, and the launch need not
            # wait for the zygote to pass the request on (a few ms on a busy machine, during
            # which no other run could be launched or reaped). Should the standby have died
            # meanwhile, the zygote answers "failed" and reports that process's exit, which
            # ends the run as any worker's early death does.
            return taken
        with self._cond:
            if not self._cond.wait_for(
                lambda: request_id in self._replies or not self.alive, SPAWN_TIMEOUT
            ):
                raise ExecutorError("The prefork zygote did not answer in time")
            reply = self._replies.pop(request_id, None)
        if reply is None:
            raise ExecutorError("The prefork zygote is gone")
        if "pid" not in reply:
            raise ExecutorError(f"Cannot launch {module}: {reply.get('error')}")
        return int(reply["pid"])

    # -- the standby: a child waiting, already inside a spare cgroup (see the zygote) ------

    def refill(self, containment: Containment) -> None:
        """Keep :data:`STANDBYS` standbys ready for the next launches (where cgroups are
        usable): when at most one is left, the others are asked for in one message, and
        the zygote forks them one after the other, serving what comes meanwhile first."""
        batch = []
        with self._cond:
            if len(self._spares) > 1 or containment.host is None or not self.alive:
                return
            if containment.host.version != "cgroup1":  # no rename: a spare stays a spare
                return
            owner = _owner_tag()
            for _ in range(STANDBYS - len(self._spares)):
                try:
                    spare = containment.host.create(
                        f"{SPARE_PREFIX}{owner}-{uuid.uuid4().hex}", Limits()
                    )
                except ExecutorError:
                    break
                self._spares[spare.name] = spare
                procs = [str(path) for path in spare.procs_files]
                batch.append({"name": spare.name, "cgroup_procs": procs})
        if batch:
            with contextlib.suppress(OSError), self._send_lock:
                self._send({"op": "standby", "standbys": batch})

    def take_standby(
        self, name: str, containment: Containment, limits: Limits
    ) -> tuple[Setup, str] | None:
        """The oldest ready standby's cgroup renamed ``name``, for a launch without limits,
        and the standby's name for the spawn request."""
        if limits.memory_bytes is not None or limits.pids is not None or limits.cpu is not None:
            return None
        with self._cond:
            if not self._ready or not self._spares[self._ready[0]].rename(name):
                return None
            standby = self._ready.pop(0)
            spare = self._spares.pop(standby)
        return Setup(containment.plan(limits, name), spare), standby

    def _standby_message(self, message: dict[str, Any]) -> None:
        """Under the condition: a standby joined its spare (or could not)."""
        name = message["name"]
        if name not in self._spares:
            return
        if message["op"] == "standby-ready":
            self._ready.append(name)
            if isinstance(message.get("pid"), int):
                self._standby_pids[name] = message["pid"]
        else:
            Setup({}, self._spares.pop(name)).end()

    def _read(self) -> None:
        for line in self._file:
            message = json.loads(line)
            with self._cond:
                if message.get("op") == "exit":
                    self._exits[int(message["pid"])] = int(message["code"])
                elif message.get("op") in ("standby-ready", "standby-failed"):
                    self._standby_message(message)
                elif int(message["id"]) in self._unanswered:
                    self._unanswered.discard(int(message["id"]))
                else:
                    self._replies[int(message["id"])] = message
                self._cond.notify_all()
        with self._cond:
            self.alive = False
            self._cond.notify_all()

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        """The exit code the zygote reports for ``pid`` (None: not within ``timeout``, or
        the zygote died and the code is lost)."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or not self.alive, timeout)
            if pid in self._exits or self.alive:
                return self._exits.get(pid)
        return self._wait_orphan(pid, timeout)

    @staticmethod
    def _wait_orphan(pid: int, timeout: float | None) -> None:
        wait_exit(pid, timeout)

    def forget(self, pid: int) -> None:
        with self._cond:
            self._exits.pop(pid, None)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if getattr(self, "_reader", None) is not None:
            self._reader.join(5)
        self._file.close()
        self._sock.close()
        spares, self._spares, self._ready = getattr(self, "_spares", {}), {}, []
        self._standby_pids = {}
        for spare in spares.values():  # their standbys end with the zygote
            Setup({}, spare).end()
