"""The seed's unpaged lists, streamed: ``list_task_statuses {}`` and ``list_task_ids {}``.

An unpaged list of 100,000 statuses built as models, then as one dict, then as one JSON
document costs seconds and holds the whole answer several times over. The index already
keeps each status as the bytes of its answer (packed, see
:mod:`runyard.repository.keptbytes`), so these two answers are written out as they are
once unpacked, a batch of items per chunk, in the Job API envelope the model path answers
with: ``{"answer":[...],"success":true,"metadata":{}}``. Only a ``running`` status is
built as a model, to settle a dead worker as the model path does (they are few); a status
whose kept bytes are damaged is read from its file (and indexed again).

The fast path is the admin's unpaged, unfiltered-by-text call, ``detail: "full"`` or
``"summary"`` (each item's summary made from its answer bytes, with no model built); a run
token's answer is filtered and scrubbed, and pages carry a cursor: those take the model
path of :mod:`runyard.api.jobs`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from runyard.agents.models import RunScope
from runyard.api.detail import summarize
from runyard.api.services import Services
from runyard.repository import keptbytes
from runyard.repository.records import RAW, STATE, StatusRecord, wire_bytes
from runyard.runtime.liveness import settle
from runyard.workspace.atomic import dump_json
from runyard.workspace.identity import TASK_TYPES
from runyard.workspace.records import TaskStatus

STREAMED_JOBS = frozenset({"list_task_statuses", "list_task_ids"})
# statuses per chunk (about 300 KB). Chunks of 2,048 (1.3 MB) made the unpaged list at
# 100,000 tasks 15-25 % slower: what the socket does not take at once waits in the
# transport's buffer and is copied there again, and a large chunk leaves the CPU's cache.
BATCH = 512
ID_BATCH = 2048  # task ids per chunk (about 50 KB)
Entry = tuple[str, StatusRecord]
HEAD = b'{"answer":['
TAIL = b'],"success":true,"metadata":{}}'


def is_full_list(job_name: str, arguments: Any, scope: RunScope | None) -> bool:
    """Whether this call is answered by :func:`full_list_response`."""
    if job_name not in STREAMED_JOBS or scope is not None:
        return False
    if job_name == "list_task_ids":
        return True
    paged = arguments.limit or arguments.cursor or arguments.text
    known = arguments.task_type is None or arguments.task_type in TASK_TYPES  # else: its error
    return not paged and known


async def full_list_response(services: Services, job_name: str, arguments: Any) -> Response:
    """The whole list, streamed (see the module docstring); call when :func:`is_full_list`."""
    repository = services.repository
    if job_name == "list_task_ids":
        ids = await run_in_threadpool(repository.list_ids)
        body: Iterator[bytes] = _ids_body(ids)
    else:
        state = arguments.state.value if arguments.state else None
        entries = await run_in_threadpool(
            repository.list_entries, state=state, task_type=arguments.task_type
        )
        body = _statuses_body(services, entries, arguments.detail == "summary")
    return StreamingResponse(body, media_type="application/json")


def _ids_body(ids: list[str]) -> Iterator[bytes]:
    yield HEAD
    for start in range(0, len(ids), ID_BATCH):
        chunk = dump_json(ids[start : start + ID_BATCH])[1:-1]
        yield chunk if start == 0 else b"," + chunk
    yield TAIL


def _statuses_body(services: Services, entries: list[Entry], summary: bool) -> Iterator[bytes]:
    """Runs in the thread pool (a sync iterator): settling may read and write files."""
    yield HEAD
    first = True
    for start in range(0, len(entries), BATCH):
        items = _items(services, entries[start : start + BATCH])
        if summary:
            items = [dump_json(summarize(json.loads(item))) for item in items]
        if items:
            chunk = b",".join(items)
            yield chunk if first else b"," + chunk
            first = False
    yield TAIL


def _items(services: Services, entries: list[Entry]) -> list[bytes]:
    items = []
    unpack = keptbytes.unpack  # what status_json does, without a call more per item
    for task_id, record in entries:
        item = unpack(record[RAW])
        if item is None or record[STATE] == "running":
            item = _read_or_settled(services, task_id, item)
            if item is None:
                continue  # damaged, and its file is gone or invalid now
        items.append(item)
    return items


def _read_or_settled(services: Services, task_id: str, item: bytes | None) -> bytes | None:
    """A running status settled, or a damaged one read from its file (None if invalid)."""
    if item is None:
        status = services.repository.get(task_id)
        if status is None:
            return None
    else:
        status = TaskStatus.model_validate_json(item)
    settled = settle(services.workspace, status)
    return item if settled is status and item is not None else wire_bytes(settled)
