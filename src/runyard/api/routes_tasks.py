"""``GET /api/v1/tasks``: the task list the Studio shows, sorted by a chosen column.

Query: ``limit`` (1-1000, default 50), ``cursor`` (the ``next_cursor`` of the previous
page), ``state``, ``task_type``, ``task`` (a registered task name, i.e. the definition),
``text`` (case-insensitive search), ``sort`` (one of :data:`ordering.SORT_KEYS`, default
``created_at``, or a tracked ``metrics.<name>`` / ``params.<name>``, optionally ending in
``:asc``/``:desc``), ``order`` (``asc``/``desc``, default ``desc``) and ``filter``
(``params.<name>=<value>``, repeatable; see :mod:`runyard.repository.tracked`). Answer::

    {"items": [TaskStatus, ...], "next_cursor": str | null, "total": int,
     "sort": "created_at", "order": "desc"}

``total`` counts every task the filter keeps (all pages). A cursor is valid only for the
sort and order it was made for. Bad values answer 400 ``{"error": {code, message}}``.
The newest-first order pages straight from the index; other orders sort the filtered set.
A run token sees only its own session's tasks, as everywhere.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.scopes import request_scope, status_filter
from runyard.api.services import Services
from runyard.errors import InvalidInput
from runyard.repository.ordering import (
    DEFAULT_ORDER,
    DEFAULT_SORT,
    Order,
    Position,
    check_sort,
    decode_sorted_cursor,
    encode_sorted_cursor,
    sorted_page,
)
from runyard.repository.records import StatusRecord, status_json
from runyard.repository.repository import Matcher
from runyard.repository.tracked import Filter, parse_filters, split_order, status_matches
from runyard.runtime.liveness import settle
from runyard.workspace.records import TaskStatus

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {raw!r}")
    return value


def _name_matcher(task: str | None, visible: Matcher | None) -> Matcher | None:
    """Keep tasks registered as ``task`` (the middle part of the id), and what ``visible``
    keeps."""
    if not task:
        return visible

    def keep(task_id: str, record: StatusRecord) -> bool:
        parts = task_id.split("#")
        named = len(parts) >= 3 and parts[1] == task
        return named and (visible is None or visible(task_id, record))

    return keep


def _params_matcher(filters: list[Filter], visible: Matcher | None) -> Matcher | None:
    """Keep tasks whose params hold every filter, and what ``visible`` keeps."""
    if not filters:
        return visible

    def keep(task_id: str, record: StatusRecord) -> bool:
        raw = status_json(record)
        if raw is None or not status_matches(json.loads(raw), filters):
            return False
        return visible is None or visible(task_id, record)

    return keep


class TaskListing:
    """One list request: filters, sort and paging over the repository's index."""

    def __init__(self, services: Services, request: Request) -> None:
        query = request.query_params
        self.services = services
        self.sort, order = split_order(query.get("sort") or DEFAULT_SORT, query.get("order"))
        self.order: Order = check_sort(self.sort, order or DEFAULT_ORDER)
        self.limit = _limit(query.get("limit"))
        self.cursor = query.get("cursor") or None
        self.filters: dict[str, Any] = {
            "state": query.get("state") or None,
            "task_type": query.get("task_type") or None,
            "text": query.get("text") or None,
            "visible": _params_matcher(
                parse_filters(query.getlist("filter")),
                _name_matcher(query.get("task"), status_filter(services, request_scope(request))),
            ),
        }
        self.unfiltered = not any(self.filters[k] for k in ("text", "visible"))

    def answer(self) -> dict[str, Any]:
        newest_first = (self.sort, self.order) == (DEFAULT_SORT, DEFAULT_ORDER)
        items, next_cursor = self._by_index() if newest_first else self._by_sort()
        ws = self.services.workspace
        items = [settle(ws, i) if i.state == "running" else i for i in items]
        return {
            "items": [item.to_json() for item in items],
            "next_cursor": next_cursor,
            "total": self._total(),
            "sort": self.sort,
            "order": self.order,
        }

    def _by_index(self) -> tuple[list[TaskStatus], str | None]:
        after = decode_sorted_cursor(self.cursor, self.sort, self.order) if self.cursor else None
        repo_cursor = None
        if after is not None:
            if not isinstance(after.value, str):
                raise InvalidInput(f"Invalid cursor {self.cursor!r}: pass a previous next_cursor")
            repo_cursor = after.value
        items, last = self.services.repository.list_statuses(
            limit=self.limit, cursor=repo_cursor, **self.filters
        )
        position = Position(last, "") if last else None
        return items, self._encode(position)

    def _by_sort(self) -> tuple[list[TaskStatus], str | None]:
        after = decode_sorted_cursor(self.cursor, self.sort, self.order) if self.cursor else None
        everything, _ = self.services.repository.list_statuses(limit=None, **self.filters)
        items, last = sorted_page(everything, self.sort, self.order, after=after, limit=self.limit)
        return items, self._encode(last)

    def _encode(self, position: Position | None) -> str | None:
        return encode_sorted_cursor(self.sort, self.order, position) if position else None

    def _total(self) -> int:
        repository = self.services.repository
        if self.unfiltered:
            state, task_type = self.filters["state"], self.filters["task_type"]
            return sum(
                count
                for (kind, at), count in repository.counts().items()
                if (state is None or at == state) and (task_type is None or kind == task_type)
            )
        return len(repository.list_statuses(limit=None, **self.filters)[0])


def build_tasks_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["tasks"])

    @router.get("/tasks")
    async def list_tasks(request: Request) -> Any:
        """Task statuses, filtered, sorted and paged (see the module docstring); a bad
        query value raises InvalidInput, answered 400 ``invalid_query`` (api/errormap.py)."""
        listing = TaskListing(services, request)
        return await run_in_threadpool(listing.answer)

    return router
