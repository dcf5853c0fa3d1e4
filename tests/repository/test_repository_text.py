"""The text filter of list_statuses: ids, names, states, errors and config values."""

from __future__ import annotations

from pathlib import Path

from repo_helpers import make_workspace, put_status

from runyard.repository import TaskRepository


def build(tmp_path: Path) -> TaskRepository:
    ws = make_workspace(tmp_path)
    put_status(ws, "base#demo#alpha", created=1)
    put_status(ws, "etl#loader#beta", created=2, state="failed", error="ValueError: Prices Missing")
    put_status(ws, "base#demo#gamma", created=3, config={"task_name": "gamma", "source_tasks": "", "dataset": "Tokyo-Prices"})
    put_status(ws, "base#demo#delta", created=4, config={"task_name": "delta", "source_tasks": "", "note": "東京"})
    for index in range(40):
        put_status(ws, f"base#demo#filler-{index}", created=10 + index)
    repo = TaskRepository(ws)
    repo.start(watch=False)
    return repo


def ids(items: list) -> list[str]:
    return [s.task_id for s in items]


def test_text_matches_values_not_field_names(tmp_path: Path) -> None:
    repo = build(tmp_path)
    assert ids(repo.list_statuses(text="ALPHA")[0]) == ["base#demo#alpha"]
    assert ids(repo.list_statuses(text="prices")[0]) == ["base#demo#gamma", "etl#loader#beta"]
    assert ids(repo.list_statuses(text="loader")[0]) == ["etl#loader#beta"]
    assert ids(repo.list_statuses(text="東京")[0]) == ["base#demo#delta"]
    assert repo.list_statuses(text="source_tasks")[0] == []
    assert ids(repo.list_statuses(text="prices", state="failed")[0]) == ["etl#loader#beta"]
    assert ids(repo.list_statuses(text="prices", task_type="base")[0]) == ["base#demo#gamma"]


def test_text_pages_cover_every_match_once(tmp_path: Path) -> None:
    repo = build(tmp_path)
    everything = ids(repo.list_statuses(text="filler")[0])
    assert len(everything) == 40
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = repo.list_statuses(text="filler", limit=7, cursor=cursor)
        seen += ids(page)
        if cursor is None:
            break
    assert seen == everything
