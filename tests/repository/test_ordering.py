"""Keyset paging of a sorted task list: a page continues after the last row's position."""

from __future__ import annotations

from runyard.repository.ordering import Position, sorted_page
from runyard.workspace.records import TaskStatus


def status(n: int, name: str) -> TaskStatus:
    return TaskStatus.model_validate(
        {
            "task_id": f"etl#{name}#run-{n}",
            "run_id": f"{n:032x}",
            "task_type": "etl",
            "task_name": name,
            "state": "succeeded",
            "created_at": f"2026-01-01T00:00:{n:02d}Z",
        }  # fmt: skip
    )


def test_a_row_added_before_the_cursor_neither_repeats_nor_shifts_the_next_page() -> None:
    rows = [status(n, name) for n, name in enumerate(["b", "d", "f", "h"])]
    first, position = sorted_page(rows, "task_name", "asc", after=None, limit=2)
    assert [s.task_name for s in first] == ["b", "d"] and position == Position(
        "d", first[1].task_id
    )
    # an offset cursor would now show "d" again; the keyset cursor continues after it
    grown = [*rows, status(9, "a"), status(10, "c"), status(11, "e")]
    second, position = sorted_page(grown, "task_name", "asc", after=position, limit=2)
    assert [s.task_name for s in second] == ["e", "f"] and position is not None
    last, end = sorted_page(grown, "task_name", "asc", after=position, limit=2)
    assert [s.task_name for s in last] == ["h"] and end is None
