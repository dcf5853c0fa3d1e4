"""The compare and metrics answers made from a real workspace's files: JSON equality of
params, an absent param as a value of its own, summaries of live and finished runs, and
a task folder's hostile files (a symlinked metrics file, garbage) read as nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from runyard.errors import InvalidInput, RunNotFound
from runyard.tracking.views import compare_answer, metrics_answer, split_ref, task_runs
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace


def make_task(ws: Workspace, name: str, n: int, **fields: Any) -> str:
    task_id = f"train#fit#{name}"
    created = f"2026-04-01T10:00:{n:02d}.000000Z"
    record = {
        "task_id": task_id, "run_id": f"{n:032x}", "task_type": "train", "task_name": "fit",
        "state": "succeeded", "config": {"task_name": name, "source_tasks": ""},
        "created_at": created, "started_at": created, "finished_at": created, "pid": None,
        "exit_code": 0, "error": "", "result": {}, "steps": [], "log_path": "", **fields,
    }  # fmt: skip
    folder = ws.task_dir(task_id)
    folder.mkdir(parents=True)
    write_json_atomic(folder / "status.json", record, fsync=False)
    return task_id


def points(*rows: tuple[str, int, float | str]) -> str:
    return "".join(
        json.dumps({"name": n, "step": s, "value": v, "time": 1.0 + s}) + "\n" for n, s, v in rows
    )


def current(ws: Workspace, task_id: str) -> list[Any]:
    status = ws.read_status(task_id)
    assert status is not None
    return task_runs(ws, task_id, status)


def test_params_compared_as_json_with_an_absent_one_a_value_of_its_own(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    a = make_task(ws, "a", 1, config={"task_name": "a", "source_tasks": "x", "C": 1, "k": "s"},
                  params={"opt": None, "lr": 0.1})  # fmt: skip
    b = make_task(ws, "b", 2, config={"task_name": "b", "C": 1.0, "k": "s"},
                  params={"lr": 0.2, "flag": True})  # fmt: skip
    (ws.task_dir(b) / "params.json").write_text(json.dumps({"lr": 0.3}))  # newer than status
    answer = compare_answer([*current(ws, a), *current(ws, b)])
    assert [(i["task_id"], i["params"]) for i in answer["items"]] == [
        (a, {"C": 1, "k": "s", "opt": None, "lr": 0.1}),
        (b, {"C": 1.0, "k": "s", "lr": 0.3, "flag": True}),
    ]
    assert answer["params"] == [
        {"name": "flag", "values": [None, True], "differs": True},
        {"name": "lr", "values": [0.1, 0.3], "differs": True},
        {"name": "opt", "values": [None, None], "differs": True},  # null vs absent
        {"name": "C", "values": [1, 1.0], "differs": False},  # one JSON number
        {"name": "k", "values": ["s", "s"], "differs": False},
    ]


def test_summaries_of_finished_and_live_runs_and_hostile_files(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    summary = {"last": 3.0, "min": 1.0, "max": 3.0, "step": 2, "count": 3}
    done = make_task(ws, "done", 1, metrics={"loss": summary})
    live = make_task(ws, "live", 2, state="running", metrics={"loss": summary})
    (ws.task_dir(live) / "metrics.jsonl").write_text(
        points(("loss", 0, 5.0), ("loss", 1, "NaN"), ("loss", 2, 4.0)) + "garbage\n"
        + points(("acc", 0, "Infinity"))
    )  # fmt: skip
    linked = make_task(ws, "linked", 3)
    secret = tmp_path / "secret.jsonl"
    secret.write_text(points(("stolen", 0, 1.0)))
    os.symlink(secret, ws.task_dir(linked) / "metrics.jsonl")
    answer = compare_answer([*current(ws, done), *current(ws, live), *current(ws, linked)])
    rows = {row["name"]: row["values"] for row in answer["metrics"]}
    assert rows["loss"] == [
        summary, {"last": 4.0, "min": 4.0, "max": 5.0, "step": 2, "count": 3}, None,
    ]  # fmt: skip
    assert rows["acc"] == [None, {"last": "Infinity", "min": "Infinity", "max": "Infinity",
                                  "step": 0, "count": 1}, None]  # fmt: skip
    assert "stolen" not in rows
    series = metrics_answer(live, current(ws, live), name="loss", max_points=2)
    assert series["runs"][0]["metrics"] == {
        "loss": {"steps": [0, 2], "values": [5.0, 4.0], "times": [1.0, 3.0]}
    }
    assert metrics_answer(linked, current(ws, linked))["runs"][0]["metrics"] == {}


def test_runs_and_refs_refused_clearly(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    task = make_task(ws, "one", 1)
    status = ws.read_status(task)
    with pytest.raises(RunNotFound, match="No run"):
        task_runs(ws, task, status, "f" * 32)
    for bad in ("../x", "", "a" * 65):
        with pytest.raises(InvalidInput, match="run id"):
            task_runs(ws, task, status, bad)
    assert split_ref("train:fit:one@abc") == ("train:fit:one", "abc")
    assert split_ref("one") == ("one", None)
    for bad in ("one@", "@abc", "one@a/b"):
        with pytest.raises(InvalidInput, match="@"):
            split_ref(bad)
    with pytest.raises(InvalidInput, match="metric name"):
        metrics_answer(task, current(ws, task), name="/loss")


def test_one_answer_reads_its_runs_files_up_to_one_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many runs with full-size files: the answer stops reading at the budget and marks the
    runs it cut short, so one request never holds every run's points."""
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    rows = points(*(("loss", s, 0.5) for s in range(100)))
    tasks = [make_task(ws, f"r{n}", n) for n in range(3)]
    for task_id in tasks:
        (ws.task_dir(task_id) / "metrics.jsonl").write_text(rows)
    runs = [run for task_id in tasks for run in current(ws, task_id)]
    size = len(rows.encode())
    monkeypatch.setattr("runyard.tracking.views.MAX_ANSWER_BYTES", size + size // 2)
    answer = metrics_answer("train#fit#r0", runs)["runs"]
    counts = [len(run["metrics"].get("loss", {"steps": []})["steps"]) for run in answer]
    assert counts[0] == 100 and 0 < counts[1] < 100 and counts[2] == 0, counts
    assert [run.get("truncated", False) for run in answer] == [False, True, True]
