"""Tasks that wait for their upstreams (a submit's ``depends_on``).

    ids = parse_depends_on("etl#load#today, train#fit#m1")    # or a list
    waiting = Waiting()
    waiting.add(task_id, run_id, owner)
    ready, failed = waiting.verdicts(workspace)    # whose upstreams all succeeded / one did not

A task submitted with ``depends_on`` is made at once, ``queued`` with ``waiting_for`` in its
status (the upstream ids, also recorded as its lineage in ``source_tasks``), and is held
apart from the queue: it takes no slot and is never launched while one of its upstreams
has not ``succeeded``. Once every one has, it joins the queue as any submit does; if one
ends ``failed`` or ``cancelled`` (or is deleted), it ends ``failed`` with the error
``upstream failed: <id>`` and no worker ever runs for it. The status on disk is the truth:
a restarted supervisor finds the waiting tasks again among the queued ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from runyard.errors import InvalidInput
from runyard.runtime.attempts import UPSTREAM_FAILED, retry_due
from runyard.workspace.identity import is_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus

MAX_UPSTREAMS = 256


def parse_depends_on(value: object) -> list[str]:
    """The upstream ids of ``depends_on``: a list of full task ids, or a comma-separated
    string of them (as ``source_tasks``); duplicates dropped, order kept."""
    if value is None:
        return []
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value if item.strip()]
    else:
        raise InvalidInput("depends_on must be a list of full task ids or a comma-separated string")
    bad = [item for item in items if not is_task_id(item)]
    if bad:
        raise InvalidInput(
            f"depends_on entry {bad[0]!r} is not a full task id ('<task_type>#<task>#<task_name>')"
        )
    ids = list(dict.fromkeys(items))
    if len(ids) > MAX_UPSTREAMS:
        raise InvalidInput(f"depends_on names {len(ids)} tasks; at most {MAX_UPSTREAMS}")
    return ids


def with_lineage(inputs: dict[str, object], upstreams: list[str]) -> dict[str, object]:
    """``inputs`` whose ``source_tasks`` also names every upstream (each once)."""
    if not upstreams:
        return inputs
    given = inputs.get("source_tasks")
    known = [part.strip() for part in given.split(",")] if isinstance(given, str) else []
    merged = list(dict.fromkeys([*(k for k in known if k), *upstreams]))
    return {**inputs, "source_tasks": ",".join(merged)}


@dataclass(frozen=True)
class Entry:
    run_id: str
    owner: str | None  # the slot owner it will queue under (see runtime.fairqueue)


class Waiting:
    """The runs held back for their upstreams, by task id (the supervisor's lock guards it)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, task_id: str, run_id: str, owner: str | None) -> None:
        self._entries[task_id] = Entry(run_id, owner)

    def take(self, task_id: str) -> Entry | None:
        return self._entries.pop(task_id, None)

    def clear(self) -> None:
        self._entries.clear()

    def verdicts(
        self, workspace: Workspace
    ) -> tuple[list[tuple[str, Entry]], list[tuple[str, Entry, str]]]:
        """Take out the runs that may go on: ``(ready, failed)``, each failed one with its
        error. A run whose status is gone or no longer its own is dropped."""
        ready: list[tuple[str, Entry]] = []
        failed: list[tuple[str, Entry, str]] = []
        for task_id, entry in list(self._entries.items()):
            status = workspace.read_status(task_id)
            if status is None or status.run_id != entry.run_id or status.terminal:
                del self._entries[task_id]
                continue
            blocker = upstream_verdict(workspace, status)
            if blocker is None:
                ready.append((task_id, entry))
            elif blocker.startswith(UPSTREAM_FAILED):
                failed.append((task_id, entry, blocker))
            else:
                continue
            del self._entries[task_id]
        return ready, failed


def upstream_verdict(workspace: Workspace, status: TaskStatus) -> str | None:
    """None when every upstream of ``status`` succeeded; ``upstream failed: <id>`` when one
    failed, was cancelled or is gone; ``"waiting"`` while one is queued or running, or
    failed with a retry to follow (only its last attempt decides)."""
    waiting = False
    for upstream in status.waiting_for or []:
        found = workspace.read_status(upstream)
        if found is None and workspace.read_metadata(upstream) is not None:
            continue  # a metadata-only task: a success recorded without a status
        if found is None:
            return f"{UPSTREAM_FAILED}{upstream} (it no longer exists)"
        if retry_due(found):
            waiting = True
            continue
        if found.state in (TaskState.FAILED, TaskState.CANCELLED):
            return f"{UPSTREAM_FAILED}{upstream} ({found.state.value})"
        waiting = waiting or found.state is not TaskState.SUCCEEDED
    return "waiting" if waiting else None
