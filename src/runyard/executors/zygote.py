"""The zygote of the pre-forked launcher: ``python -m runyard.executors.zygote <socket fd>``.

It imports the modules it is told to preload and calls the warm-up it is given (see
:mod:`runyard.runtime.warmup`), then forks one child per spawn request (it
joins its cgroup and rlimits before it runs anything of the task) and reports each child's
pid and exit code over the socket (JSON lines, see
:mod:`runyard.executors.prefork`). It stays single-threaded and exits when the socket closes;
children it forked run on.
"""

from __future__ import annotations

import _signal
import _thread
import base64
import collections
import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any, NoReturn

from runyard.executors.containment import join_self
from runyard.executors.local import open_log, stdin_fd
from runyard.runtime.proctitle import prepare_titles

SOCKET = ""  # what the selector's keys carry; a standby's key carries its spare's name
SIGNAL = "."


def serve(fd: int) -> int:
    prepare_titles()  # before any child replaces its environment (see proctitle)
    return Zygote(socket.socket(fileno=fd)).run()


def run_module(module: str) -> int:
    """Run ``module`` as ``python -m`` would: its ``main()`` if it has one, else as __main__."""
    loaded = importlib.import_module(module)
    main = getattr(loaded, "main", None)
    if callable(main):
        result = main()
        return result if isinstance(result, int) else 0
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


class Zygote:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = b""
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, SOCKET)
        self.selector.register(self.wake_r, selectors.EVENT_READ, SIGNAL)
        # the standbys by the name of their spare cgroup: pid, request pipe, ready pipe
        self.standbys: dict[str, tuple[int, int, int]] = {}
        # the standbys asked for and not forked yet: name, cgroup.procs files
        self.to_fork: collections.deque[tuple[str, list[str]]] = collections.deque()

    def run(self) -> int:
        while True:
            for key, _ in self.selector.select(0 if self.to_fork else None):
                if key.data == SIGNAL:
                    self._drain_wake()
                    self._reap()
                elif key.data == SOCKET:
                    if not self._receive():
                        return 0
                else:  # a standby's ready pipe, named by its spare
                    self._standby_ready(key.fd, key.data)
            if self.to_fork:  # one standby of a batch a turn: what came meanwhile goes first
                self._fork_standby(*self.to_fork.popleft())

    def _receive(self) -> bool:
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            return False
        if not data:
            return False
        self.pending += data
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            self._handle(json.loads(line))
        return True

    def _handle(self, message: dict[str, Any]) -> None:
        if message.get("op") == "preload":
            errors = self._preload(message.get("modules", []))
            if message.get("warm"):
                errors.update(self._warm(message["warm"]))
            gc.collect()
            gc.freeze()  # children then leave the preloaded heap shared (no copy-on-write by gc)
            self._reply({"op": "ready", "errors": errors})
        elif message.get("op") == "spawn":
            if message.get("standby") and self._spawn_standby(message):
                return
            if message.get("taken"):  # its client went on with the standby's pid as the run's
                error = f"the standby {message.get('standby')} is gone"
                self._reply({"op": "failed", "id": message["id"], "error": error})
                return
            self._spawn(message)
        elif message.get("op") == "standby":
            # back to back (see _fork_standby), but a request that comes meanwhile is served
            # before the next one: a batch takes a few ms, which a launch need not wait
            self.to_fork.extend((one["name"], one["cgroup_procs"]) for one in message["standbys"])

    # A standby is a child forked ahead of time that joined a spare cgroup and waits for
    # its spawn request: the launcher renames the spare to the run's cgroup, so the worker
    # starts contained with no cgroup migration (which waits for an RCU grace period, many
    # ms on a quiet machine) on the way. They come in batches, forked nearly back to back
    # (one a turn of the loop, after the messages that came meanwhile): after a fork every
    # page the zygote writes is copied, so the pages its own work touches are copied about
    # once a batch rather than once a launch. Serving a launch between two forks of a batch
    # copies some pages again (floor.py: 196 faults a task in the launcher, against 157
    # with the batch forked whole first), and is still the faster of the two.
    def _fork_standby(self, name: str, procs: list[str]) -> None:
        request_r, request_w = os.pipe()
        ready_r, ready_w = os.pipe()
        _flush()
        pid = os.fork()
        if pid == 0:
            os.close(request_w)
            os.close(ready_r)
            self._wait_as_standby(procs, request_r, ready_w)
        os.close(request_r)
        os.close(ready_w)
        self._drop_standby(name)
        self.standbys[name] = (pid, request_w, ready_r)
        self.selector.register(ready_r, selectors.EVENT_READ, name)

    def _standby_ready(self, ready_r: int, name: str) -> None:
        self.selector.unregister(ready_r)
        joined = os.read(ready_r, 1) == b"1"
        if not joined:
            self._drop_standby(name)
            self._reply({"op": "standby-failed", "name": name})
            return
        self._reply({"op": "standby-ready", "name": name, "pid": self.standbys[name][0]})

    def _spawn_standby(self, request: dict[str, Any]) -> bool:
        standby = self.standbys.pop(request["standby"], None)
        if standby is None:
            return False
        pid, request_w, ready_r = standby
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(ready_r)
        os.close(ready_r)
        try:  # it joined its cgroup already
            _write_all(request_w, json.dumps({**request, "cgroup_procs": []}).encode())
        except OSError:
            return False
        finally:
            os.close(request_w)
        self._reply({"op": "spawned", "id": request["id"], "pid": pid})
        return True

    def _drop_standby(self, name: str) -> None:
        standby = self.standbys.pop(name, None)
        if standby is not None:
            _, request_w, ready_r = standby
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(ready_r)
            os.close(request_w)  # it reads EOF and exits
            os.close(ready_r)

    def _wait_as_standby(self, procs: list[str], request_r: int, ready_w: int) -> NoReturn:
        try:
            self._leave_zygote()
            try:
                join_self(procs, [])
            except OSError:
                os.write(ready_w, b"0")
                os._exit(1)
            os.write(ready_w, b"1")
            os.close(ready_w)
            raw = _read_all(request_r)
            request = json.loads(raw) if raw else None
            if request is not None:
                log_fd = open_log(request["log_path"])
                data = base64.b64decode(request["stdin"])
                in_fd = stdin_fd(data) if data else os.open(os.devnull, os.O_RDONLY)
                self._child(request, log_fd, in_fd, left=True)
        except BaseException:
            traceback.print_exc()
        os._exit(1)

    @staticmethod
    def _preload(modules: list[str]) -> dict[str, str]:
        errors = {}
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as exc:  # reported to the client; the module loads per child then
                errors[module] = f"{type(exc).__name__}: {exc}"
        return errors

    @staticmethod
    def _warm(target: str) -> dict[str, str]:
        """Call ``module:function`` (see :mod:`runyard.runtime.warmup`); a failure is reported
        and the zygote runs unwarmed, unless it left a thread: forking is then unsafe and the
        zygote exits (its client falls back to plain processes)."""
        errors = {}
        try:
            module, _, name = target.partition(":")
            getattr(importlib.import_module(module), name)()
        except Exception as exc:
            errors[target] = f"{type(exc).__name__}: {exc}"
            print(f"runyard launcher: warm-up {target} failed: {errors[target]}", file=sys.stderr)
        if threading.active_count() > 1 or _thread._count() > 0:  # bare threads count too
            print("runyard launcher: a thread of the warm-up still runs; not forking",
                  file=sys.stderr, flush=True)
            raise SystemExit(1)
        return errors

    def _reply(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(json.dumps(message).encode() + b"\n")

    def _spawn(self, request: dict[str, Any]) -> None:
        try:
            log_fd = open_log(request["log_path"])
            data = base64.b64decode(request["stdin"])
            in_fd = stdin_fd(data) if data else os.open(os.devnull, os.O_RDONLY)
        except (OSError, ValueError) as exc:
            self._reply({"op": "failed", "id": request["id"], "error": str(exc)})
            return
        _flush()
        try:
            pid = os.fork()
        except OSError as exc:
            self._reply({"op": "failed", "id": request["id"], "error": str(exc)})
            pid = -1
        if pid == 0:
            self._child(request, log_fd, in_fd)
        os.close(log_fd)
        os.close(in_fd)
        if pid > 0:
            self._reply({"op": "spawned", "id": request["id"], "pid": pid})

    def _child(
        self, request: dict[str, Any], log_fd: int, in_fd: int, left: bool = False
    ) -> NoReturn:
        code = 1
        try:
            os.setsid()
            if not left:
                self._leave_zygote()
            for target, source in ((0, in_fd), (1, log_fd), (2, log_fd)):
                os.dup2(source, target)
            os.close(in_fd)
            os.close(log_fd)
            join_self(request.get("cgroup_procs", []), request.get("rlimits", []))
            if request.get("cwd"):
                os.chdir(request["cwd"])
            become_environment(request["env"])
            sys.argv = [request["module"], *request["args"]]
            code = run_module(request["module"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            _flush()
            os._exit(code)

    def _leave_zygote(self) -> None:
        for _, request_w, ready_r in self.standbys.values():  # other children's pipes
            os.close(request_w)
            os.close(ready_r)
        signal.set_wakeup_fd(-1)
        _signal.signal(signal.SIGCHLD, _signal.SIG_DFL)  # no enum made of the old (see taskrun)
        self.selector.close()
        self.sock.close()
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass

    def _reap(self) -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or not info.si_pid:
                return
            with contextlib.suppress(OSError):  # stragglers; the zombie still holds the pgid
                os.killpg(info.si_pid, signal.SIGKILL)
            _, status = os.waitpid(info.si_pid, 0)
            code = os.waitstatus_to_exitcode(status)
            self._reply({"op": "exit", "pid": info.si_pid, "code": code})


def become_environment(env: dict[str, str]) -> None:
    """Make ``os.environ`` exactly ``env``, changing only what differs.

    A child starts with the zygote's variables, which are mostly the task's own. Clearing
    them all and setting them again costs a worker about half a millisecond (``clear``
    copies the key list for every variable it removes) and dirties pages it would
    otherwise share with the zygote."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _read_all(fd: int) -> bytes:
    """Everything until EOF from the pipe ``fd``, which is then closed (plain reads: a
    file object is a dozen objects more for a child to make)."""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
