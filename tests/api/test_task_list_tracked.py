"""GET /api/v1/tasks sorted by a metric summary or a param, and filtered by params, on a
real server: tasks lacking the key come last in either order, cursors page the same
order, numbers sort before text, and a bad sort or filter is a 400 ``invalid_query``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from serverproc import start_server

# (name, inputs, logged params, cv_r2 last value or None)
RUNS: list[tuple[str, dict[str, Any], dict[str, Any] | None, float | str | None]] = [
    ("ridge-a", {"model": "ridge", "alpha": 0.1}, {"folds": 5}, 0.61),
    ("ridge-b", {"model": "ridge", "alpha": 1}, {"folds": 5}, 0.72),
    ("lasso-a", {"model": "lasso", "alpha": 0.1}, {"folds": 3}, 0.55),
    ("forest", {"model": "forest"}, {"folds": 5, "alpha": "auto"}, 0.80),
    ("nan-run", {"model": "ridge", "alpha": 5.0}, None, "NaN"),
    ("untracked", {"x": 1}, None, None),
]


def seed(workspace: Path) -> None:
    ws = Workspace.open(workspace, workspace.parent / "logs")
    ws.ensure()
    for n, (name, inputs, logged, last) in enumerate(RUNS):
        task_id = f"etl#fit#{name}"
        created = f"2026-03-01T10:00:{n:02d}.000000Z"
        record: dict[str, Any] = {
            "task_id": task_id, "run_id": f"{n + 1:032x}", "task_type": "etl",
            "task_name": "fit", "state": "succeeded",
            "config": {"task_name": name, "source_tasks": "", **inputs},
            "created_at": created, "started_at": created, "finished_at": created,
            "pid": None, "exit_code": 0, "error": "", "result": {}, "steps": [], "log_path": "",
        }  # fmt: skip
        if logged is not None:
            record["params"] = logged
        if last is not None:
            summary = {"last": last, "min": last, "max": last, "step": 4, "count": 5}
            record["metrics"] = {"cv_r2": summary}
        folder = ws.task_dir(task_id)
        folder.mkdir(parents=True)
        write_json_atomic(folder / "status.json", record, fsync=False)


def names(client: httpx.Client, limit: int = 2, **query: Any) -> tuple[list[str], int]:
    """Every page of the list in order (the cursor followed), and the total."""
    found: list[str] = []
    cursor = None
    for _ in range(20):
        params = {**query, "limit": limit, **({"cursor": cursor} if cursor else {})}
        reply = client.get("/api/v1/tasks", params=params)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        found += [item["task_id"].rsplit("#", 1)[1] for item in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            return found, body["total"]
    raise AssertionError("paging did not end")


def test_sorted_by_metrics_and_params_filtered_by_params(tmp_path: Path) -> None:
    seed(tmp_path / "srv" / "ws")
    server = start_server(tmp_path / "srv")
    try:
        with server.client() as client:
            check_metric_sort(client)
            check_param_sort(client)
            check_param_filters(client)
            check_refusals(client)
    finally:
        server.stop()


def check_metric_sort(client: httpx.Client) -> None:
    ranked = ["forest", "ridge-b", "ridge-a", "lasso-a"]
    lacking = ["untracked", "nan-run"]  # no metric, a NaN last value: last, by id desc
    assert names(client, sort="metrics.cv_r2:desc")[0] == ranked + lacking
    assert names(client, sort="metrics.cv_r2", order="desc", limit=3)[0] == ranked + lacking
    ascending = names(client, sort="metrics.cv_r2", order="asc")[0]
    assert ascending == [*reversed(ranked), "nan-run", "untracked"]
    item = client.get("/api/v1/tasks", params={"sort": "metrics.cv_r2:desc", "limit": 1})
    top = item.json()["items"][0]
    assert top["metrics"]["cv_r2"]["last"] == 0.80
    assert top["params"] == {"folds": 5, "alpha": "auto"}


def check_param_sort(client: httpx.Client) -> None:
    # numbers (the inputs', ties by task id), then text (forest's logged "auto"), then
    # the task without an alpha
    expected = ["lasso-a", "ridge-a", "ridge-b", "nan-run", "forest", "untracked"]
    assert names(client, sort="params.alpha", order="asc", limit=1) == (expected, len(RUNS))
    descending = ["nan-run", "ridge-b", "ridge-a", "lasso-a", "forest", "untracked"]
    assert names(client, sort="params.alpha", order="desc")[0] == descending
    folds = names(client, sort="params.folds:desc", limit=4)[0]  # logged params sort too
    assert folds == ["ridge-b", "ridge-a", "forest", "lasso-a", "untracked", "nan-run"]


def check_param_filters(client: httpx.Client) -> None:
    found, total = names(client, filter="params.model=ridge", sort="task_id", order="asc")
    assert found == ["nan-run", "ridge-a", "ridge-b"] and total == 3
    both = {"filter": ["params.model=ridge", "params.alpha=1.0"]}  # 1 and 1.0: one number
    assert names(client, **both)[0] == ["ridge-b"]
    assert names(client, filter="params.alpha=0.1", sort="task_id", order="asc")[0] == [
        "lasso-a", "ridge-a"
    ]  # fmt: skip
    logged = names(client, filter=["params.folds=3"])  # a logged param, not an input
    assert logged == (["lasso-a"], 1)
    assert names(client, filter="params.alpha=auto")[0] == ["forest"]
    assert names(client, filter="params.model=svm") == ([], 0)
    assert names(client, filter="params.folds=5", sort="metrics.cv_r2:desc")[0] == [
        "forest", "ridge-b", "ridge-a"
    ]  # fmt: skip


def check_refusals(client: httpx.Client) -> None:
    for params in (
        {"sort": "metrics."}, {"sort": "params."}, {"sort": "metrics.x", "order": "sideways"},
        {"sort": "metrics.cv_r2:desc", "order": "asc"}, {"sort": "params" + "." + "x" * 300},
        {"filter": "model=ridge"}, {"filter": "params.model"}, {"filter": "metrics.cv_r2=1"},
        {"filter": "params.=1"}, {"filter": [f"params.p{n}=1" for n in range(21)]},
    ):  # fmt: skip
        reply = client.get("/api/v1/tasks", params=params)
        assert reply.status_code == 400, (params, reply.status_code, reply.text)
        error = reply.json()["error"]
        assert error["code"] == "invalid_query" and error["message"], params
    by_metric = client.get("/api/v1/tasks", params={"sort": "metrics.cv_r2:desc", "limit": 1})
    cursor = by_metric.json()["next_cursor"]
    # a cursor of one metric's sort is refused by another metric's, never misread
    other = client.get("/api/v1/tasks", params={"sort": "metrics.loss:desc", "cursor": cursor})
    assert other.status_code == 400 and "start again" in other.json()["error"]["message"]
