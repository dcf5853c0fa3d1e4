"""``runyard ls`` pages: a default limit, a cursor to go on, and a footer saying so.

The cursor is the id of the last task shown: the next page starts just after it in the
newest-first order, so tasks created meanwhile never shift a page already seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runyard.errors import InvalidInput

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


def cut(items: list[TaskStatus], limit: int | None, cursor: str | None) -> Page:
    """The page of ``items`` (newest first) after ``cursor``, at most ``limit`` long."""
    start = 0
    if cursor is not None:
        ids = [item.task_id for item in items]
        if cursor not in ids:
            raise InvalidInput(f"--cursor {cursor!r} is not a task in this list")
        start = ids.index(cursor) + 1
    rest = items[start:]
    shown = rest if limit is None else rest[:limit]
    more = len(rest) > len(shown)
    return Page(shown, len(items), shown[-1].task_id if more and shown else None)
