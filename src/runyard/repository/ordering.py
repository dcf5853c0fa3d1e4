"""Sorting a task list by a chosen column, with keyset cursors that follow that sort.

The index keeps statuses ordered by creation time only; any other order is made here from
the filtered statuses. A page cursor names the last row's position in the order (its sort
value and task id) together with the sort it belongs to, so a page is exactly "the rows
after that position" even while tasks are added or removed, and a cursor of another sort
is refused instead of silently paging the wrong list.

Rows without a value for the column (a queued task has no ``started_at``; an unfinished
one has no duration) come last in either direction. Besides the columns of
:data:`SORT_KEYS`, a list sorts by a param or a metric summary
(:mod:`runyard.repository.tracked`: ``metrics.<name>``, ``params.<name>``), where numbers
come before text in either direction.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from runyard.errors import InvalidInput
from runyard.repository.tracked import tracked_key
from runyard.workspace.records import TaskStatus

Order = Literal["asc", "desc"]
SortValue = float | str | None


def _instant(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _duration(status: TaskStatus) -> float | None:
    start, end = _instant(status.started_at), _instant(status.finished_at)
    return None if start is None or end is None else max(end - start, 0.0)


SORT_KEYS: dict[str, Callable[[TaskStatus], SortValue]] = {
    "created_at": lambda s: _instant(s.created_at),
    "started_at": lambda s: _instant(s.started_at),
    "finished_at": lambda s: _instant(s.finished_at),
    "duration": _duration,
    "state": lambda s: s.state.value,
    "task_type": lambda s: s.task_type,
    "task_name": lambda s: s.task_name,
    "task_id": lambda s: s.task_id,
}
"""The columns a list may be sorted by (a whitelist: nothing else reaches a sort)."""

DEFAULT_SORT = "created_at"
DEFAULT_ORDER: Order = "desc"


@dataclass(frozen=True)
class Position:
    """Where a page ends in a sorted list: the last row's sort value and task id."""

    value: SortValue
    task_id: str


def sort_key(sort: str) -> Callable[[TaskStatus], SortValue]:
    """The sort value of a column, a ``params.<name>`` or a ``metrics.<name>``;
    :class:`InvalidInput` names the accepted sorts."""
    key = SORT_KEYS.get(sort) or tracked_key(sort)
    if key is None:
        raise InvalidInput(
            f"Unknown sort {sort[:300]!r}: use one of {', '.join(SORT_KEYS)},"
            " metrics.<name> or params.<name>"
        )
    return key


def check_sort(sort: str, order: str) -> Order:
    """The validated order; :class:`InvalidInput` names the accepted values."""
    sort_key(sort)
    if order not in ("asc", "desc"):
        raise InvalidInput(f"Unknown order {order!r}: use asc or desc")
    return "asc" if order == "asc" else "desc"


def encode_sorted_cursor(sort: str, order: Order, position: Position) -> str:
    raw = json.dumps([sort, order, position.value, position.task_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_sorted_cursor(cursor: str, sort: str, order: Order) -> Position:
    """The position a cursor names; :class:`InvalidInput` if it is malformed or was made
    for another sort or order."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        name, direction, value, task_id = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"Invalid cursor {cursor!r}: pass the next_cursor of a previous page"
        ) from exc
    if (name, direction) != (sort, order):
        raise InvalidInput(
            f"This cursor belongs to a list sorted by {name} {direction}, not {sort} {order}:"
            " start again without a cursor"
        )
    if not isinstance(task_id, str) or not isinstance(value, (int, float, str, type(None))):
        raise InvalidInput(f"Invalid cursor {cursor!r}: pass the next_cursor of a previous page")
    return Position(float(value) if isinstance(value, int) else value, task_id)


def _compare(order: Order) -> Callable[[Position, Position], int]:
    sign = 1 if order == "asc" else -1

    def compare(a: Position, b: Position) -> int:
        if (a.value is None) != (b.value is None):
            return 1 if a.value is None else -1  # missing values last, whatever the order
        if isinstance(a.value, str) != isinstance(b.value, str):
            return 1 if isinstance(a.value, str) else -1  # a param's numbers before its text
        if a.value is not None and b.value is not None and a.value != b.value:
            return sign if a.value > b.value else -sign  # type: ignore[operator]
        if a.task_id == b.task_id:
            return 0
        return sign if a.task_id > b.task_id else -sign

    return compare


def sorted_page(
    statuses: Sequence[TaskStatus],
    sort: str,
    order: Order,
    *,
    after: Position | None,
    limit: int | None,
) -> tuple[list[TaskStatus], Position | None]:
    """One page of ``statuses`` in the given order, after ``after``; with the position to
    continue from (None on the last page)."""
    key = sort_key(sort)
    compare = _compare(order)
    rows: list[tuple[Position, TaskStatus]] = [
        (Position(key(status), status.task_id), status) for status in statuses
    ]
    order_key = functools.cmp_to_key(compare)
    rows.sort(key=lambda row: order_key(row[0]))
    if after is not None:
        rows = [row for row in rows if compare(row[0], after) > 0]
    page = rows if limit is None else rows[:limit]
    more = limit is not None and len(rows) > limit
    return [status for _, status in page], (page[-1][0] if more and page else None)
