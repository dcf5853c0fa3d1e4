"""Where a worker's records go: its task folder, or the keeper outside its sandbox.

    records = records_for(workspace, task_id)   # FolderRecords, or ChannelRecords in a sandbox
    records.append_event({"kind": "progress", ...})
    records.write_status(status, durable=False)
    records.write_metadata(metadata)

A plain worker writes ``events.jsonl``, ``status.json`` and ``metadata.json`` itself. A
worker in a sandbox cannot reach its task's records at all: it sends each one, a JSON line
``{"event": …}``, ``{"status": …, "durable": …}`` or ``{"metadata": …}``, on the socket
named by ``RUNYARD_RECORDS_FD`` (see :class:`ChannelRecords`) to the record keeper
(:mod:`runyard.runtime.recordkeeper`), a process of the server's user outside the sandbox
that checks each one and writes it.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from typing import Any, Protocol

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.events import append_event
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskMetadata, TaskStatus

RECORDS_FD_ENV = "RUNYARD_RECORDS_FD"


class Records(Protocol):
    """The three records a worker writes (see the module docstring)."""

    def append_event(self, event: dict[str, Any]) -> None: ...
    def write_status(self, status: TaskStatus, *, durable: bool) -> None: ...
    def write_metadata(self, metadata: TaskMetadata) -> None: ...


class FolderRecords:
    """The records of a task written into its folder, as every plain worker does."""

    def __init__(self, workspace: Workspace, task_id: str) -> None:
        self.workspace = workspace
        self._events = workspace.events_path(task_id)

    def append_event(self, event: dict[str, Any]) -> None:
        append_event(self._events, event)

    def write_status(self, status: TaskStatus, *, durable: bool) -> None:
        if durable:
            self.workspace.write_status(status, durable=True)
        else:  # a progress write: not fsynced (a crash loses at most that progress)
            path = self.workspace.status_path(status.task_id)
            write_json_atomic(path, status.to_json(), fsync=False)

    def write_metadata(self, metadata: TaskMetadata) -> None:
        self.workspace.write_metadata(metadata)


class ChannelRecords:
    """The records of a sandboxed worker, sent to its keeper over a ``SOCK_SEQPACKET``
    socket: each record one JSON line, cut into messages of at most :data:`CHUNK` bytes,
    each headed ``<pid> <more>`` and a newline. A packet is never split nor mixed with another, so
    the keeper joins each process's parts in order even when a forked child of the task
    reports at the same time as its parent."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        _CHANNELS.add(self)

    def append_event(self, event: dict[str, Any]) -> None:
        self._send({"event": event})

    def write_status(self, status: TaskStatus, *, durable: bool) -> None:
        self._send({"status": status.to_json(), "durable": durable})

    def write_metadata(self, metadata: TaskMetadata) -> None:
        self._send({"metadata": metadata.to_json()})

    def _send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        pid = os.getpid()
        with self._lock:
            for start in range(0, max(len(line), 1), CHUNK):
                more = int(start + CHUNK < len(line))
                os.write(self._fd, b"%d %d\n" % (pid, more) + line[start : start + CHUNK])


CHUNK = 32 * 1024
_CHANNELS: weakref.WeakSet[ChannelRecords] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for channel in list(_CHANNELS):  # a lock held by a thread the child does not have
        channel._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def records_for(workspace: Workspace, task_id: str) -> Records:
    """The keeper's channel where the sandbox gave one, else the task folder."""
    fd = os.environ.get(RECORDS_FD_ENV)
    if fd is not None and fd.isdigit():
        return ChannelRecords(int(fd))
    return FolderRecords(workspace, task_id)
