"""``runyard ls`` pages: a default limit, a cursor to go on, and a footer saying so.

The cursor is the id of the last task shown: the next page starts just after it in the
newest-first order, so tasks created meanwhile never shift a page already seen. Pages are
cut where the tasks are kept (the server's task list, or the workspace's index), so a
page costs one page of statuses, not the whole list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_LIMIT = 50


class StatusRow(Protocol):
    """What a listing shows of a status: a ``TaskStatus``, or a :class:`Listed` one."""

    @property
    def task_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def created_at(self) -> str: ...
    @property
    def started_at(self) -> str | None: ...
    @property
    def finished_at(self) -> str | None: ...
    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Listed:
    """A status of the server's task list as it sent it (``TaskStatus.to_json``'s shape):
    the fields a table shows, and the record unchanged for ``--json``. A listing builds no
    model: the server checked every record it keeps."""

    record: dict[str, Any]

    @property
    def task_id(self) -> str:
        return str(self.record["task_id"])

    @property
    def state(self) -> str:
        return str(self.record["state"])

    @property
    def created_at(self) -> str:
        return str(self.record.get("created_at") or "")

    @property
    def started_at(self) -> str | None:
        return self.record.get("started_at")

    @property
    def finished_at(self) -> str | None:
        return self.record.get("finished_at")

    def to_json(self) -> dict[str, Any]:
        return self.record


@dataclass
class Page:
    items: Sequence[StatusRow]
    total: int  # tasks the filter keeps, on every page
    next_cursor: str | None  # the id to pass as --cursor for the next page

    def footer(self) -> str | None:
        """What to say under the table when the list goes on."""
        if self.next_cursor is None:
            return None
        return (
            f"showing {len(self.items)} of {self.total} — use --limit/--cursor or --all "
            f"(next page: --cursor '{self.next_cursor}')"
        )


def page_of(items: Sequence[StatusRow], total: int, more: bool) -> Page:
    """The page ``items``; ``more``: tasks follow it, so the footer gives the cursor."""
    return Page(items, total, items[-1].task_id if more and items else None)


def index_cursor(task_id: str, created_at: str) -> str:
    """The repository's cursor for the place just after ``task_id`` (created at
    ``created_at``) in the newest-first order."""
    from runyard.repository.index import encode_cursor
    from runyard.repository.records import sort_instant

    return encode_cursor((sort_instant(created_at), task_id))


def list_cursor(task_id: str, created_at: str) -> str:
    """The same place as a cursor of the server's task list (``GET /api/v1/tasks``) in its
    default order, newest first."""
    from runyard.repository.ordering import (
        DEFAULT_ORDER,
        DEFAULT_SORT,
        Position,
        encode_sorted_cursor,
    )

    position = Position(index_cursor(task_id, created_at), "")
    return encode_sorted_cursor(DEFAULT_SORT, DEFAULT_ORDER, position)
