"""The record keeper: the host side of a run-submitted task, outside its sandbox.

Started as ``python -m runyard.runtime.recordkeeper`` in place of the sandbox, with a JSON
payload on stdin (:class:`KeeperPayload`). It holds the worker's lock of the task folder,
starts the sandbox (``setpriv``/``bwrap``/the worker) with one end of a socket as
``RUNYARD_RECORDS_FD``, and writes the records the worker sends there
(:mod:`runyard.runtime.recordsink`), each checked against the run it was launched for:

- the run's identity, inputs, cache key, creation time, submitter, limits and log are the server's
  (its ``queued`` status), whatever a record says; only the state and what the run made of
  it (times, steps, exit code, error, result) come from the worker;
- states only move forward (``queued`` → ``running`` → an end), and nothing follows an end;
- the end is written once the sandbox is gone: its files are moved into the task folder
  (:mod:`runyard.runtime.sandboxfiles`), every artifact the result names is hashed again
  here, then ``metadata.json`` (on success), the state event and the final status.

The task's code never sees the records: its task folder inside the sandbox is
``<task folder>/.sandbox``. A worker that dies without an end leaves the end to the server
(:func:`runyard.runtime.liveness.end_dead_run`), as any worker does. The keeper exits as
its sandbox did (the same code, or the same signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runyard.errors import UnsafePath
from runyard.runtime.liveness import state_event
from runyard.runtime.recordsink import RECORDS_FD_ENV
from runyard.runtime.sandboxfiles import adopt_sandbox_files
from runyard.runtime.workerlock import acquire_worker_lock
from runyard.workspace.artifacts import artifact_record
from runyard.workspace.events import append_event
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskMetadata, TaskState, TaskStatus, status_from_dict

EXIT_REFUSED = 75
MAX_RECORD = 16 * 1024 * 1024  # a status, metadata or event over this is dropped
MAX_PARTS = 2 * MAX_RECORD  # unfinished records of every sender together
MAX_EVENT = 64 * 1024
DRAIN_SECONDS = 1.0  # how long records are still read once the sandbox has exited
WORKER_FIELDS = (
    "state", "started_at", "finished_at", "exit_code", "error", "result", "steps",
    "params", "metrics",  # experiment tracking: checked by TaskStatus (no bare NaN)
)
ORDER = {TaskState.QUEUED: 0, TaskState.RUNNING: 1}
# progress statuses a task sends faster than this are written together (as the worker does)
PROGRESS_WRITE_INTERVAL = 0.05


@dataclass(frozen=True)
class KeeperPayload:
    workspace: str
    log_dir: str
    task_id: str
    run_id: str
    argv: list[str]  # the sandbox, which runs the worker
    worker_stdin: str  # the worker's own payload

    @classmethod
    def parse(cls, raw: bytes) -> KeeperPayload:
        data = json.loads(raw)
        argv = data["argv"]
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not argv:
            raise ValueError("argv must be a non-empty list of strings")
        strings = {n: str(data[n]) for n in cls.__dataclass_fields__ if n != "argv"}
        return cls(argv=argv, **strings)

    def dump(self) -> bytes:
        return json.dumps(self.__dict__).encode()


@dataclass
class RecordKeeper:
    """Checks and writes the records of one run (see the module docstring)."""

    workspace: Workspace
    queued: TaskStatus
    pid: int
    status: TaskStatus = field(init=False)
    final: TaskStatus | None = None
    metadata: TaskMetadata | None = None
    dropped: int = 0
    held: bool = False  # a progress status not written yet (see flush)
    status_writes: int = 0
    _written_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.status = self.queued

    def take(self, raw: bytes) -> None:
        """One record line from the worker: written, held (an end) or dropped."""
        try:
            message = json.loads(raw) if len(raw) <= MAX_RECORD else None
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict) or self.final is not None:
            self.dropped += 1
            return
        try:
            self._take(message, raw)
        except OSError as exc:  # a full disk, say: that record is lost, as in a crash
            print(f"runyard record keeper: a record was not written: {exc}", file=sys.stderr)

    def _take(self, message: dict[str, Any], raw: bytes) -> None:
        if "event" in message:
            self._event(message["event"], raw)
        elif "status" in message:
            self._status(message["status"], bool(message.get("durable")))
        elif "metadata" in message:
            self._metadata(message["metadata"])
        else:
            self.dropped += 1

    def _event(self, event: Any, raw: bytes) -> None:
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind != "progress" or len(raw) > MAX_EVENT:
            self.dropped += kind != "state"  # state events are the keeper's own to write
            return
        append_event(self.workspace.events_path(self.queued.task_id), event)

    def _status(self, data: Any, durable: bool) -> None:
        sent = status_from_dict(data, self.queued.task_id) if isinstance(data, dict) else None
        if sent is None or sent.run_id != self.queued.run_id:
            self.dropped += 1
            return
        if sent.state.terminal:
            self.final = self._checked(sent)
            return
        if ORDER[sent.state] < ORDER.get(self.status.state, 2):
            self.dropped += 1
            return
        moved = sent.state != self.status.state
        self.status = self._checked(sent)
        if moved:
            append_event(self._events, state_event(sent.state, sent.started_at))
        elif not durable and time.monotonic() - self._written_at < PROGRESS_WRITE_INTERVAL:
            self.held = True  # progress faster than the worker ever sends it: written later
            return
        self._write(durable)

    def flush(self) -> None:
        """Write the progress held back, once its interval has passed (the relay calls it)."""
        if self.held and time.monotonic() - self._written_at >= PROGRESS_WRITE_INTERVAL:
            try:
                self._write(False)
            except OSError as exc:  # as in take: that progress is lost, the run goes on
                print(f"runyard record keeper: progress not written: {exc}", file=sys.stderr)

    def _write(self, durable: bool) -> None:
        self.held = False
        self.workspace.write_status(self.status, durable=durable)
        self._written_at = time.monotonic()
        self.status_writes += 1

    def _checked(self, sent: TaskStatus) -> TaskStatus:
        update = {name: getattr(sent, name) for name in WORKER_FIELDS}
        return self.queued.model_copy(update={**update, "pid": self.pid})

    def _metadata(self, data: Any) -> None:
        try:
            sent = TaskMetadata.model_validate(data)
        except ValidationError:
            self.dropped += 1
            return
        queued = self.queued
        self.metadata = TaskMetadata(
            task_id=queued.task_id, reg_name=queued.task_name, created_at=queued.created_at,
            task_type=queued.task_type, input_params=queued.config,
            output_params=sent.output_params, cache_key=queued.cache_key,
        )  # fmt: skip

    @property
    def _events(self) -> Path:
        return self.workspace.events_path(self.queued.task_id)

    def finish(self) -> None:
        """The sandbox is gone: its files into the task folder, then the end, if it sent one."""
        task_dir = self.workspace.task_dir(self.queued.task_id)
        adopt_sandbox_files(task_dir)
        final = self.final
        if final is None:
            return  # died without an end: recorded by the server, as for any worker
        if final.state is TaskState.SUCCEEDED:
            final = self._published(final, task_dir)
        append_event(self._events, state_event(final.state, final.finished_at))
        self.workspace.write_status(final, durable=True)

    def _published(self, final: TaskStatus, task_dir: Path) -> TaskStatus:
        """Write the metadata of a success, its artifacts hashed here; the status to write
        after it (``failed`` when the success cannot be vouched for)."""
        if self.metadata is None:
            return _failed(final, "the run reported success without its metadata")
        result = dict(self.metadata.output_params)
        try:
            result["artifacts"] = _rehashed(task_dir, result.get("artifacts") or {})
        except (UnsafePath, OSError, KeyError, TypeError) as exc:
            return _failed(final, f"an artifact the run recorded is not as it said: {exc}")
        self.workspace.write_metadata(self.metadata.model_copy(update={"output_params": result}))
        return final.model_copy(update={"result": result})


def _rehashed(task_dir: Path, artifacts: Any) -> dict[str, Any]:
    """Each artifact's record made again from the file in the task folder (size, sha256)."""
    if not isinstance(artifacts, dict):
        raise TypeError("artifacts is not a mapping")
    return {name: artifact_record(task_dir, ref["path"]) for name, ref in artifacts.items()}


def _failed(final: TaskStatus, error: str) -> TaskStatus:
    return final.model_copy(
        update={"state": TaskState.FAILED, "exit_code": final.exit_code or 1, "error": error,
                "result": {}}
    )  # fmt: skip


def main() -> int:
    try:
        payload = KeeperPayload.parse(sys.stdin.buffer.read())
    except (ValueError, KeyError, TypeError) as exc:
        print(f"runyard record keeper: bad payload on stdin: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    workspace = Workspace(Path(payload.workspace), Path(payload.log_dir))
    lock_fd = acquire_worker_lock(workspace.lock_path(payload.task_id), payload.run_id)
    queued = workspace.read_status(payload.task_id)
    if lock_fd is None or queued is None or queued.run_id != payload.run_id:
        print(f"runyard record keeper: not starting {payload.task_id}", file=sys.stderr)
        return EXIT_REFUSED
    keeper = RecordKeeper(workspace, queued, os.getpid())
    code = run_sandbox(payload, keeper)
    keeper.finish()
    if keeper.dropped:
        print(f"runyard record keeper: {keeper.dropped} records refused", file=sys.stderr)
    sys.stdout.flush()
    return code


def run_sandbox(payload: KeeperPayload, keeper: RecordKeeper) -> int:
    """Start the sandbox, keep its records until it is gone; its exit status."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(os.environ, **{RECORDS_FD_ENV: str(theirs.fileno())})
    proc = subprocess.Popen(
        payload.argv, stdin=subprocess.PIPE, env=env, pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    _forward_signals(proc)
    assert proc.stdin is not None
    try:
        proc.stdin.write(payload.worker_stdin.encode())
        proc.stdin.close()
    except OSError:  # the sandbox ended before it read its payload
        pass
    with ours:
        _relay(ours, proc, keeper)
    return proc.wait()


def _relay(ours: socket.socket, proc: subprocess.Popen[bytes], keeper: RecordKeeper) -> None:
    parts: dict[bytes, bytearray] = {}
    deadline: float | None = None
    while True:
        timeout = PROGRESS_WRITE_INTERVAL if keeper.held else 0.5
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - time.monotonic()))
        ready, _, _ = select.select([ours], [], [], timeout)
        if ready:
            packet = ours.recv(1 << 17)
            if not packet:
                return  # every holder of the worker's end is gone
            _joined(packet, parts, keeper)
        keeper.flush()
        if not ready and deadline is not None:
            return  # the sandbox exited and nothing more came: a stray holder waits no longer
        if deadline is None and proc.poll() is not None:
            deadline = time.monotonic() + DRAIN_SECONDS


def _joined(packet: bytes, parts: dict[bytes, bytearray], keeper: RecordKeeper) -> None:
    """Add one packet (``<pid> <more>\\n<part>``) to its sender's record; take it when whole."""
    head, _, body = packet.partition(b"\n")
    sender, _, more = head.partition(b" ")
    held = parts.setdefault(sender, bytearray())
    waiting = sum(len(part) for part in parts.values())  # a few senders at most
    if len(held) + len(body) > MAX_RECORD or waiting + len(body) > MAX_PARTS:
        del parts[sender]  # forked senders cannot make the keeper hold more than this
        keeper.dropped += 1
        return
    held += body
    if more != b"1":
        keeper.take(bytes(held))
        del parts[sender]


def _forward_signals(proc: subprocess.Popen[bytes]) -> None:
    """A cancel's SIGTERM (sent to the whole group) is the sandbox's to act on: the keeper
    stays to write what the worker sends until it is gone."""

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)


def exit_as(code: int) -> None:
    """Leave as the sandbox did: its exit code, or killed by the same signal."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    exit_as(main())
