"""``runyard ls`` pages: a default limit, a cursor to go on, and a footer saying so.

The cursor is the id of the last task shown: the next page starts just after it in the
newest-first order, so tasks created meanwhile never shift a page already seen. Pages are
cut where the tasks are kept (the server's task list, or the workspace's index), so a
page costs one page of statuses, not the whole list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runyard.workspace.records import TaskStatus

DEFAULT_LIMIT = 50


@dataclass
class Page:
    items: list[TaskStatus]
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


def page_of(items: list[TaskStatus], total: int, more: bool) -> Page:
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
