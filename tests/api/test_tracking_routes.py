"""Reading and comparing tracked runs on a real server: ``GET /api/v1/tasks/{id}/metrics``
and ``GET /api/v1/compare``, the clients' ``metrics``/``compare`` and the CLI's ``--json``.

Real ``command`` tasks log 3 metrics over 1,000 steps through ``$RUNYARD_METRICS_FILE``
(a spike at step 500, a garbage line, a NaN) and write the params a task logs; a rerun
under the same name keeps the first run, which stays readable by its run id."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from runyard.client import AsyncClient, Client
from serverproc import ServerProcess, start_server

STEPS = 1000
SPIKE_STEP = 500
METRICS = ("acc", "loss", "lr")
SCRIPT = """\
import json, os, sys
model, scale = sys.argv[1], float(sys.argv[2])
with open(os.environ["RUNYARD_METRICS_FILE"], "a") as out:
    for step in range({steps}):
        loss = scale / (step + 1) + (50.0 if step == {spike} else 0.0)
        for name, value in (("loss", loss), ("acc", step / {steps} * scale),
                            ("lr", 0.1 * 0.99 ** step)):
            out.write(json.dumps({{"name": name, "value": value, "step": step}}) + "\\n")
    out.write("this is no JSON\\n")
    out.write(json.dumps({{"name": "nan_metric", "value": "NaN", "step": 0}}) + "\\n")
with open("params.json", "w") as params:
    json.dump({{"model": model, "folds": 5}}, params)
"""


def expected(name: str, scale: float) -> list[float]:
    """The values the script logs for ``name``, computed as it computes them."""
    if name == "loss":
        return [scale / (s + 1) + (50.0 if s == SPIKE_STEP else 0.0) for s in range(STEPS)]
    if name == "acc":
        return [s / STEPS * scale for s in range(STEPS)]
    return [0.1 * 0.99**s for s in range(STEPS)]


def metrics_path(task_id: str) -> str:
    return f"/api/v1/tasks/{quote(task_id, safe='')}/metrics"


def submit(server: ServerProcess, script: Path, name: str, model: str, scale: float) -> str:
    command = f"{sys.executable} {script} {model} {scale}"
    handle = server.call("submit", task="command", task_name=name, command=command)["answer"]
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["answer"]["state"] == "succeeded", final
    return str(handle["run_id"])


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server with task ``sweep`` run twice (scales 1 then 2) and ``other`` once (3)."""
    root = tmp_path_factory.mktemp("tracking")
    script = root / "log3.py"
    script.write_text(SCRIPT.format(steps=STEPS, spike=SPIKE_STEP))
    server = start_server(root / "srv")
    try:
        first = submit(server, script, "sweep", "ridge", 1.0)
        second = submit(server, script, "sweep", "ridge", 2.0)
        other = submit(server, script, "other", "lasso", 3.0)
        yield {"server": server, "first": first, "second": second, "other": other}
    finally:
        server.stop()


def test_every_point_of_every_run_read_back_in_order(tracked: dict[str, Any]) -> None:
    server: ServerProcess = tracked["server"]
    with server.client() as client:
        reply = client.get(metrics_path("sweep"))  # a task's name is enough
        assert reply.status_code == 200, reply.text
        body = reply.json()
    assert body["task_id"] == "base#command#sweep"
    runs = body["runs"]
    assert [(r["run_id"], r["current"], r["state"]) for r in runs] == [
        (tracked["second"], True, "succeeded"), (tracked["first"], False, "succeeded"),
    ]  # fmt: skip
    for run, scale in zip(runs, (2.0, 1.0), strict=True):
        assert set(run["metrics"]) == {*METRICS, "nan_metric"}  # the garbage line skipped
        for name in METRICS:
            series = run["metrics"][name]
            assert series["steps"] == list(range(STEPS))
            assert series["values"] == expected(name, scale)
            assert series["times"] == sorted(series["times"]) and len(series["times"]) == STEPS
        assert run["metrics"]["nan_metric"]["values"] == ["NaN"]


def test_one_run_one_metric_and_thinned_series(tracked: dict[str, Any]) -> None:
    server: ServerProcess = tracked["server"]
    with server.client() as client:
        earlier = client.get(metrics_path("sweep"), params={"run_id": tracked["first"]}).json()
        assert [r["run_id"] for r in earlier["runs"]] == [tracked["first"]]
        assert earlier["runs"][0]["current"] is False
        assert earlier["runs"][0]["metrics"]["loss"]["values"] == expected("loss", 1.0)
        query = {"name": "loss", "max_points": "50"}
        thinned = client.get(metrics_path("base:command:sweep"), params=query).json()
    for run, scale in zip(thinned["runs"], (2.0, 1.0), strict=True):
        assert set(run["metrics"]) == {"loss"}
        series = run["metrics"]["loss"]
        assert 2 < len(series["steps"]) <= 50
        assert series["steps"][0] == 0 and series["steps"][-1] == STEPS - 1
        assert series["steps"] == sorted(series["steps"])
        assert SPIKE_STEP in series["steps"]  # the spike survives the thinning
        values = expected("loss", scale)
        assert series["values"] == [values[s] for s in series["steps"]]


def test_compare_lists_the_differing_params_first_and_both_summaries(
    tracked: dict[str, Any],
) -> None:
    server: ServerProcess = tracked["server"]
    with server.client() as client:
        reply = client.get("/api/v1/compare", params=[("id", "sweep"), ("id", "other")])
        assert reply.status_code == 200, reply.text
        body = reply.json()
        earlier = f"base#command#sweep@{tracked['first']}"
        kept = client.get("/api/v1/compare", params=[("id", earlier), ("id", "sweep")]).json()
    items = body["items"]
    assert [(i["task_id"], i["run_id"]) for i in items] == [
        ("base#command#sweep", tracked["second"]), ("base#command#other", tracked["other"]),
    ]  # fmt: skip
    assert items[0]["params"]["model"] == "ridge" and items[1]["params"]["folds"] == 5
    assert "task_name" not in items[0]["params"]  # inputs every task has are no params
    rows = {row["name"]: row for row in body["params"]}
    assert rows["model"] == {"name": "model", "values": ["ridge", "lasso"], "differs": True}
    assert rows["folds"] == {"name": "folds", "values": [5, 5], "differs": False}
    differing = [row["differs"] for row in body["params"]]
    assert differing == sorted(differing, reverse=True)  # every differing row first
    names = [row["name"] for row in body["params"]]
    split = differing.count(True)
    assert names[:split] == sorted(names[:split]) and names[split:] == sorted(names[split:])
    assert {"command", "model"} <= set(names[:split]) and "folds" in names[split:]
    assert [row["name"] for row in body["metrics"]] == ["acc", "loss", "lr", "nan_metric"]
    loss = next(row for row in body["metrics"] if row["name"] == "loss")["values"]
    for summary, scale in zip(loss, (2.0, 3.0), strict=True):
        values = expected("loss", scale)
        assert summary["last"] == values[-1] and summary["step"] == STEPS - 1
        assert summary["min"] == min(values) and summary["max"] == values[SPIKE_STEP] > 50
    nan = next(row for row in body["metrics"] if row["name"] == "nan_metric")["values"]
    assert nan[0]["last"] == "NaN" and nan[0]["min"] is None and nan[0]["max"] is None
    assert [i["run_id"] for i in kept["items"]] == [tracked["first"], tracked["second"]]
    assert kept["metrics"][1]["values"][0]["last"] == expected("loss", 1.0)[-1]
    assert [row["name"] for row in kept["params"] if row["differs"]] == ["command"]


def test_bad_queries_answer_400_and_missing_ones_404(tracked: dict[str, Any]) -> None:
    server: ServerProcess = tracked["server"]
    sweep = metrics_path("sweep")
    with server.client() as client:
        for query in (
            {"max_points": "1"}, {"max_points": "10001"}, {"max_points": "ten"},
            {"max_points": "-5"}, {"name": "/loss"}, {"name": "lo$s"}, {"name": "x" * 251},
            {"run_id": "../../server"}, {"run_id": "a/b"}, {"run_id": "x" * 65},
        ):  # fmt: skip
            reply = client.get(sweep, params=query)
            assert reply.status_code == 400, (query, reply.text)
            assert reply.json()["error"]["code"] == "invalid_query", query
        for refs in (["sweep"], [], ["sweep"] * 21, ["sweep", "other@"], ["sweep", "@abc"],
                     ["sweep", "other@../x"], ["sweep", "base#command#.."]):  # fmt: skip
            reply = client.get("/api/v1/compare", params=[("id", ref) for ref in refs])
            assert reply.status_code == 400, (refs, reply.text)
            error = reply.json()["error"]
            assert error["code"] == "invalid_query" and error["message"], refs
        for path, params in (
            (metrics_path("no-such-task"), {}), (sweep, {"run_id": "f" * 32}),
            ("/api/v1/compare", [("id", "sweep"), ("id", "no-such-task")]),
            ("/api/v1/compare", [("id", "sweep"), ("id", "other@" + "f" * 32)]),
        ):  # fmt: skip
            reply = client.get(path, params=params)
            assert reply.status_code == 404, (path, params, reply.text)
            assert str(server.workspace) not in reply.text
    with httpx.Client(base_url=server.url) as anonymous:
        assert anonymous.get(sweep).status_code == 401
        assert anonymous.get("/api/v1/compare?id=sweep&id=other").status_code == 401


def test_clients_answer_typed_metrics_and_comparisons(tracked: dict[str, Any]) -> None:
    server: ServerProcess = tracked["server"]
    with Client(server.url, server.token) as client:
        answer = client.metrics("sweep")
        assert [run.current for run in answer.runs] == [True, False]
        assert answer.runs[1].metrics["acc"].values == expected("acc", 1.0)
        assert answer.runs[0].metrics["nan_metric"].values == ["NaN"]
        one = client.metrics("sweep", run_id=tracked["first"], name="lr", max_points=10)
        assert list(one.runs[0].metrics) == ["lr"] and len(one.runs[0].metrics["lr"].steps) <= 10
        table = client.compare(["sweep", "other"])
        assert table.params[0].differs and table.items[1].params["model"] == "lasso"
        assert table.metrics[1].values[0] is not None
        assert table.metrics[1].values[0].max == max(expected("loss", 2.0))
        with pytest.raises(TypeError):
            client.compare("sweep")  # type: ignore[arg-type]
        command = table.items[0].params["command"]
        page = client.task_page(
            sort="metrics.loss:desc", params={"shell": False, "command": command}
        )
        assert [status.task_id for status in page] == ["base#command#sweep"] and page.total == 1
        ranked = client.task_page(sort="metrics.acc", order="desc", params={"shell": False})
        assert [status.task_id for status in ranked][:2] == [
            "base#command#other",
            "base#command#sweep",
        ]

    async def read() -> tuple[Any, Any]:
        async with AsyncClient(server.url, server.token) as aclient:
            return await aclient.metrics("other", name="acc"), await aclient.compare(
                ["other", f"sweep@{tracked['first']}"]
            )

    async def listed() -> list[str]:
        async with AsyncClient(server.url, server.token) as aclient:
            page = await aclient.task_page(sort="params.command", params={"shell": False})
            return [status.task_id for status in page]

    assert set(asyncio.run(listed())) >= {"base#command#sweep", "base#command#other"}
    metrics, compared = asyncio.run(read())
    assert metrics.runs[0].metrics["acc"].values == expected("acc", 3.0)
    assert [item.run_id for item in compared.items] == [tracked["other"], tracked["first"]]


def run_cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], env=server.cli_env(), cwd=server.root,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_cli_prints_the_api_answers_and_tables(tracked: dict[str, Any]) -> None:
    server: ServerProcess = tracked["server"]
    done = run_cli(server, "metrics", "sweep", "--json")
    assert done.returncode == 0, done.stderr
    with server.client() as client:
        assert json.loads(done.stdout) == client.get(metrics_path("sweep")).json()
        compared = client.get("/api/v1/compare", params=[("id", "sweep"), ("id", "other")])
    done = run_cli(server, "compare", "sweep", "other", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == compared.json()
    table = run_cli(server, "metrics", "sweep", "--run", tracked["first"], "--name", "loss")
    assert table.returncode == 0, table.stderr
    assert tracked["first"] in table.stdout and tracked["second"] not in table.stdout
    assert "0..999" in table.stdout and "50.002" in table.stdout  # the spike: 50 + 1/501
    assert any(block in table.stdout for block in "▁▂▃▄▅▆▇█")
    side = run_cli(server, "compare", "sweep", "other")
    assert side.returncode == 0, side.stderr
    lines = side.stdout.splitlines()
    model = next(line for line in lines if " model " in f" {line} ")
    assert "≠" in model and "ridge" in model and "lasso" in model
    folds = next(line for line in lines if " folds " in f" {line} ")
    assert "≠" not in folds
    missing = run_cli(server, "metrics", "no-such-task")
    assert missing.returncode == 1 and "no-such-task" in missing.stderr
    refused = run_cli(server, "compare", "sweep")
    assert refused.returncode != 0 and "2 to 20" in refused.stderr
