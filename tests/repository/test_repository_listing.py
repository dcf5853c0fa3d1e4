"""Listing: order, pages by cursor, filters, ids and results."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_metadata, put_status

from runyard.errors import InvalidInput
from runyard.repository import TaskRepository
from runyard.repository.index import MERGE_LIMIT
from runyard.workspace import TaskStatus, Workspace

TYPES = ["base", "etl", "train", "predict", "backtest", "analysis", "inference"]
STATES = ["queued", "running", "succeeded", "failed", "cancelled"]


def populate(ws: Workspace, count: int, seed: int = 3) -> list[tuple[str, str, str, float]]:
    """``count`` tasks with random types, states and (often equal) creation times."""
    rng = random.Random(seed)
    made = []
    for i in range(count):
        task_type = rng.choice(TYPES)
        state = rng.choice(STATES)
        created = float(rng.randrange(count // 4 + 1))
        task_id = f"{task_type}#job#n{i:05d}"
        put_status(ws, task_id, state=state, created=created)
        made.append((task_id, task_type, state, created))
    return made


def expected_order(made: list[tuple[str, str, str, float]]) -> list[str]:
    return [m[0] for m in sorted(made, key=lambda m: (m[3], m[0]), reverse=True)]


def all_pages(repo: TaskRepository, limit: int, **filters: str) -> list[TaskStatus]:
    found: list[TaskStatus] = []
    cursor = None
    for _ in range(10_000):
        page, cursor = repo.list_statuses(limit=limit, cursor=cursor, **filters)
        assert len(page) <= limit
        found.extend(page)
        if cursor is None:
            return found
        assert len(page) == limit
    raise AssertionError("paging did not end")


@pytest.fixture(scope="module")
def thousand(tmp_path_factory: pytest.TempPathFactory) -> tuple[TaskRepository, list]:
    ws = make_workspace(tmp_path_factory.mktemp("thousand"))
    made = populate(ws, 1000)
    repo = TaskRepository(ws)
    repo.start(watch=False)
    return repo, made


def test_a_thousand_tasks_are_listed_newest_first_then_by_id_desc(thousand) -> None:
    repo, made = thousand
    statuses, cursor = repo.list_statuses()
    assert cursor is None
    assert [s.task_id for s in statuses] == expected_order(made)
    assert repo.list_ids() == expected_order(made)


@pytest.mark.parametrize("limit", [1, 7, 50, MERGE_LIMIT, MERGE_LIMIT + 1])
def test_pages_by_cursor_cover_everything_once(thousand, limit: int) -> None:
    repo, made = thousand
    assert [s.task_id for s in all_pages(repo, limit)] == expected_order(made)


@pytest.mark.parametrize(
    "filters",
    [{"state": "running"}, {"task_type": "etl"}, {"state": "failed", "task_type": "train"}],
)
def test_filters_apply_to_every_page(thousand, filters: dict[str, str]) -> None:
    repo, made = thousand
    wanted = [
        m
        for m in made
        if m[2] == filters.get("state", m[2]) and m[1] == filters.get("task_type", m[1])
    ]
    assert wanted
    assert [s.task_id for s in all_pages(repo, 13, **filters)] == expected_order(wanted)
    whole, _ = repo.list_statuses(**filters)
    assert [s.task_id for s in whole] == expected_order(wanted)


def test_next_cursor_is_none_on_the_last_page(thousand) -> None:
    repo, made = thousand
    page, cursor = repo.list_statuses(limit=len(made))
    assert len(page) == len(made) and cursor is None
    page, cursor = repo.list_statuses(limit=len(made) - 1)
    assert cursor is not None
    rest, end = repo.list_statuses(limit=5, cursor=cursor)
    assert len(rest) == 1 and end is None


@pytest.mark.parametrize(
    "arguments",
    [
        {"limit": 0},
        {"limit": -3},
        {"state": "done"},
        {"task_type": "agent"},
        {"cursor": "not a cursor"},
        {"cursor": "MTIzfGJhc2UjZGVtbw"},
    ],
)
def test_bad_listing_arguments_fail_clearly(thousand, arguments: dict) -> None:
    repo, _ = thousand
    with pytest.raises(InvalidInput):
        repo.list_statuses(**arguments)


def test_a_cursor_stays_valid_when_tasks_arrive_between_pages(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    for i in range(10):
        put_status(ws, f"base#demo#t{i}", created=i)
    repo = TaskRepository(ws)
    repo.start(watch=False)
    first, cursor = repo.list_statuses(limit=4)
    put_status(ws, "base#demo#newer", created=100)
    put_status(ws, "base#demo#older", created=-1)
    repo.refresh("base#demo#newer")
    repo.refresh("base#demo#older")
    rest = []
    while cursor is not None:
        page, cursor = repo.list_statuses(limit=4, cursor=cursor)
        rest.extend(page)
    assert [s.task_id for s in first] == [f"base#demo#t{i}" for i in (9, 8, 7, 6)]
    assert [s.task_id for s in rest] == [f"base#demo#t{i}" for i in range(5, -1, -1)] + [
        "base#demo#older"
    ]


def test_creation_times_sort_by_instant_not_by_spelling(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    spelled = {
        "base#demo#plain": "2026-01-01T00:00:00Z",
        "base#demo#fraction": "2026-01-01T00:00:00.500000Z",
        "base#demo#offset": "2026-01-01T01:00:01+01:00",
        "base#demo#naive": "2026-01-01T00:00:02",
        "base#demo#garbage": "yesterday",
    }
    for task_id, created_at in spelled.items():
        put_status(ws, task_id, created_at=created_at)
    repo = TaskRepository(ws)
    repo.start(watch=False)
    assert repo.list_ids() == [
        "base#demo#naive",
        "base#demo#offset",
        "base#demo#fraction",
        "base#demo#plain",
        "base#demo#garbage",
    ]


def test_results_are_metadata_only_newest_first(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "etl#load#no-meta", created=9)
    put_status(ws, "etl#load#both", created=1)
    put_metadata(ws, "etl#load#both", created=1)
    put_metadata(ws, "etl#load#meta-only", created=2)
    repo = TaskRepository(ws)
    repo.start(watch=False)
    assert [m.task_id for m in repo.list_results()] == ["etl#load#meta-only", "etl#load#both"]
    assert repo.list_ids() == ["etl#load#no-meta", "etl#load#both"]
    assert len(repo) == 3


def test_state_changes_move_a_task_between_filtered_lists(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "base#demo#a", state="queued")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    for state in ["running", "succeeded"]:
        put_status(ws, "base#demo#a", state=state)
        repo.refresh("base#demo#a")
        assert [s.task_id for s in repo.list_statuses(state=state)[0]] == ["base#demo#a"]
        assert sum(len(repo.list_statuses(state=s)[0]) for s in STATES) == 1
