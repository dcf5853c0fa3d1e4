"""Push finished tasks to another runyard server: diff first, then stream what differs.

>>> report = push(workspace, Receiver("http://lab-2:8765", token), TaskFilter())
>>> report.to_json()
{"sent": [...], "skipped": [...], "refused": [...], "reasons": {...}, "bytes": 123}

The source is named in every task's ``synced_from`` by a stable id kept in
``<workspace>/.sync/source.json`` (host name + a random id made once). A connection
lost mid-push raises :class:`SyncError` after the tasks already applied; pushing again
resumes, because the diff then skips them.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from runyard.sync.candidates import Candidate, TaskFilter, collect_candidates
from runyard.sync.deletion import MAX_DELETES, gone_here
from runyard.sync.diff import MAX_CANDIDATES, REFUSE, SEND, SKIP
from runyard.sync.errors import SyncError, UnsendableTask
from runyard.sync.tarstream import task_tar_stream
from runyard.tls import client_verify
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.layout import Workspace

DIFF_PATH = "/api/v1/sync/diff"
TASK_PATH = "/api/v1/sync/tasks/"
HELD_PATH = "/api/v1/sync/held"
DELETE_PATH = "/api/v1/sync/delete"
TAR_TYPE = "application/x-tar"
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# the receiver's refusals of one task (the rules, its size, its members): the push goes on
TASK_REFUSALS = frozenset({409, 413, 422})
INVALID_STATUS = (
    "not sent: its status.json is not a valid status of this task (a task may rewrite "
    "its own folder; a run_id must be 1-64 letters, digits, '_' or '-')"
)


@dataclass(frozen=True)
class Receiver:
    """The server a push goes to, and its admin token."""

    url: str
    token: str | None = None

    def client(self) -> httpx.Client:
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        url = self.url.rstrip("/")
        return httpx.Client(
            base_url=url, headers=headers, timeout=TIMEOUT, verify=client_verify(url)
        )


@dataclass
class SyncReport:
    sent: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)  # task id -> replaced run id
    deleted: list[str] = field(default_factory=list)  # with --delete: gone here, so there
    bytes: int = 0

    def refuse(self, task_id: str, reason: str) -> None:
        self.refused.append(task_id)
        self.reasons[task_id] = reason

    def to_json(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "skipped": self.skipped,
            "refused": self.refused,
            "reasons": self.reasons,
            "replaced": self.replaced,
            "deleted": self.deleted,
            "bytes": self.bytes,
        }


def source_id(workspace: Workspace) -> str:
    """This workspace's stable name as a sync source: ``<host>/<random id>``."""
    path = workspace.root / ".sync" / "source.json"
    data = read_json_tolerant(path)
    if data is None or not isinstance(data.get("id"), str):
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"id": uuid.uuid4().hex}
        write_json_atomic(path, data)
    return f"{socket.gethostname()}/{data['id']}"


def push(
    workspace: Workspace, receiver: Receiver, task_filter: TaskFilter, *, delete: bool = False
) -> SyncReport:
    """Push the terminal tasks matching ``task_filter``; with ``delete``, also delete on the
    receiver the tasks this workspace sent earlier that the filter covers and that are gone
    here. Raises :class:`SyncError` when the receiver cannot be reached or answers
    something unexpected."""
    report = SyncReport()
    candidates, unfinished, invalid = collect_candidates(workspace, task_filter)
    for task_id in unfinished:
        if task_id in task_filter.task_ids:  # named explicitly: say why it was not sent
            report.refuse(task_id, "not finished: only terminal tasks are synced")
    for task_id in invalid:
        report.refuse(task_id, INVALID_STATUS)
    source = source_id(workspace)
    try:
        with receiver.client() as client:
            for chunk in _chunks(candidates):
                send = _ask(client, chunk, report)
                for task_id in send:
                    _send_one(client, workspace, task_id, source, report)
            if delete:
                _propagate_deletions(client, workspace, task_filter, source, report)
    except httpx.HTTPError as exc:
        raise SyncError(f"sync with {receiver.url} failed: {exc!r}") from exc
    return report


def push_one(workspace: Workspace, receiver: Receiver, task_id: str) -> SyncReport:
    """Push one task (the outbox's unit of work)."""
    return push(workspace, receiver, TaskFilter(task_ids=(task_id,)))


def _chunks(items: list[Candidate]) -> Iterator[list[Candidate]]:
    step = MAX_CANDIDATES // 2
    for start in range(0, len(items), step):
        yield items[start : start + step]


def _ask(client: httpx.Client, chunk: list[Candidate], report: SyncReport) -> list[str]:
    body = {"candidates": [c.to_json() for c in chunk]}
    reply = client.post(DIFF_PATH, json=body)
    answer = _json_or_fail(reply)
    report.skipped.extend(answer.get(SKIP, []))
    for task_id, reason in answer.get(REFUSE, {}).items():
        report.refuse(task_id, reason)
    return list(answer.get(SEND, []))


def _send_one(
    client: httpx.Client, workspace: Workspace, task_id: str, source: str, report: SyncReport
) -> None:
    status = workspace.read_status(task_id)
    if status is None or not status.terminal:  # changed since the diff
        report.refuse(task_id, "no longer finished here")
        return
    try:
        stream = task_tar_stream(workspace, status)
    except UnsendableTask as exc:
        report.refuse(task_id, f"not sent: {exc.reason}")
        return
    reply = client.post(
        TASK_PATH + quote(task_id, safe=""),
        params={"source": source},
        content=stream,
        headers={"content-type": TAR_TYPE},
    )
    if reply.status_code in TASK_REFUSALS:
        report.refuse(task_id, _error_message(reply))
        return
    answer = _json_or_fail(reply)
    report.sent.append(task_id)
    report.bytes += int(answer.get("bytes", 0))
    if answer.get("replaced_run"):
        report.replaced[task_id] = answer["replaced_run"]


def _propagate_deletions(
    client: httpx.Client, workspace: Workspace, task_filter: TaskFilter, source: str,
    report: SyncReport,
) -> None:  # fmt: skip
    held = _json_or_fail(client.post(HELD_PATH, json={"source": source})).get("task_ids", [])
    gone = gone_here(workspace, [str(task_id) for task_id in held], task_filter)
    for start in range(0, len(gone), MAX_DELETES):
        body = {"source": source, "task_ids": gone[start : start + MAX_DELETES]}
        answer = _json_or_fail(client.post(DELETE_PATH, json=body))
        report.deleted.extend(answer.get("deleted", []))
        for task_id, reason in answer.get("refused", {}).items():
            report.refuse(task_id, f"not deleted: {reason}")


def _json_or_fail(reply: httpx.Response) -> dict[str, Any]:
    if reply.status_code != 200:
        raise SyncError(f"receiver answered {reply.status_code}: {_error_message(reply)}")
    try:
        data = reply.json()
    except json.JSONDecodeError as exc:
        raise SyncError("receiver answered something that is not JSON") from exc
    if not isinstance(data, dict):
        raise SyncError("receiver answered something that is not a JSON object")
    return data


def _error_message(reply: httpx.Response) -> str:
    try:
        data = reply.json()
    except ValueError:
        return reply.text[:200]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(data.get("detail", data) if isinstance(data, dict) else data)
