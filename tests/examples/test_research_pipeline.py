"""The research pipeline example (``examples/research``, installed into the venv) end to
end: ``runyard example research`` against a real server with real workers, its artifacts,
hashes and lineage across the etl/train/backtest/analysis folders, clear errors for a
failed or deleted upstream, and the Parquet preview route with its refusals."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

RESEARCH_TASKS = {"research_etl", "research_train", "research_backtest", "research_report"}


@pytest.fixture(scope="module")
def research(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One server (with the agent backend, for run tokens) and one pipeline run by the CLI,
    which finds the server through the workspace's server.json like every command."""
    root = tmp_path_factory.mktemp("research")
    server = agent_server(root / "srv", "none", max_concurrent_tasks=4)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "runyard", "example", "research",
             "--workspace-dir", str(server.workspace), "--log-dir", str(server.log_dir)],
            cwd=root, env=env, capture_output=True, text=True, timeout=110,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        final = re.search(r"Final task: (\S+)", done.stdout)
        link = re.search(r"Studio: (\S+)", done.stdout)
        compare = re.search(r"Compare the models: (\S+)", done.stdout)
        assert final and link and compare, done.stdout
        yield {"server": server, "final": final.group(1), "link": link.group(1),
               "compare": compare.group(1), "stdout": done.stdout, "elapsed": elapsed}  # fmt: skip
    finally:
        server.stop()


def answer(server: ServerProcess, job: str, **arguments: Any) -> Any:
    reply = server.call(job, **arguments)
    assert reply["success"], reply
    return reply["answer"]


def graph_of(server: ServerProcess, task_id: str) -> dict[str, Any]:
    graph: dict[str, Any] = answer(server, "get_task_graph", task_id=task_id)
    return graph


def tasks_by_kind(server: ServerProcess, final: str) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for node in graph_of(server, final)["nodes"]:
        kinds.setdefault(node["task_id"].split("#")[0], []).append(node["task_id"])
    return kinds


def run_task(server: ServerProcess, task: str, **inputs: Any) -> dict[str, Any]:
    handle = answer(server, "submit", task=task, **inputs)
    reply = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"],
                        poll_interval=0.05, timeout=100)  # fmt: skip
    status: dict[str, Any] = reply["answer"]
    return status


def preview(server: ServerProcess, task_id: str, path: str, **params: Any) -> httpx.Response:
    with server.client() as client:
        return client.get(f"/api/v1/tasks/{quote(task_id, safe='')}/preview/{path}",
                          params=params)  # fmt: skip


def test_the_cli_runs_the_whole_pipeline_and_prints_the_studio_link(
    research: dict[str, Any],
) -> None:
    server, final = research["server"], research["final"]
    assert final.startswith("analysis#research_report#")
    # a one-time login link to the report's page: the CLI holds the server token
    assert re.fullmatch(
        rf"{re.escape(server.url)}/#login=[\w%-]+&to=/tasks/{re.escape(quote(final, safe=''))}",
        research["link"],
    ), research["link"]
    assert server.token and server.token not in research["stdout"]
    for label in ("etl", "train", "backtest", "analysis"):
        assert re.search(rf"^{label}\s+{label}#research_", research["stdout"], re.M), label
    assert research["elapsed"] < 100, research["elapsed"]


def test_lineage_crosses_the_four_type_folders(research: dict[str, Any]) -> None:
    server, final = research["server"], research["final"]
    graph = graph_of(server, final)
    kinds = tasks_by_kind(server, final)
    assert {k: len(v) for k, v in kinds.items()} == {
        "etl": 1,
        "train": 2,
        "backtest": 2,
        "analysis": 1,
    }
    assert {n["state"] for n in graph["nodes"]} == {"succeeded"}
    assert not any(n["missing"] or n["provisional"] for n in graph["nodes"])
    edges = {(e["from"], e["to"]) for e in graph["edges"]}
    (etl,), (report,) = kinds["etl"], kinds["analysis"]
    assert edges == {
        *((etl, train) for train in kinds["train"]),
        *(
            (t, b)
            for t in kinds["train"]
            for b in kinds["backtest"]
            if answer(server, "status", task_id=b)["config"]["source_tasks"] == t
        ),
        *((b, report) for b in kinds["backtest"]),
    }
    assert len(edges) == 6
    for kind, ids in kinds.items():
        for task_id in ids:
            assert (server.workspace / kind / task_id / "metadata.json").is_file()


def test_every_artifact_is_recorded_with_its_size_and_sha256(research: dict[str, Any]) -> None:
    server, final = research["server"], research["final"]
    expected = {
        "etl": {"train", "test", "schema"}, "train": {"model", "metrics"},
        "backtest": {"predictions", "backtest", "plot"},
        "analysis": {"report", "summary", "comparison", "plot-1", "plot-2"},
    }  # fmt: skip
    for kind, ids in tasks_by_kind(server, final).items():
        for task_id in ids:
            status = answer(server, "status", task_id=task_id)
            artifacts = status["result"]["artifacts"]
            assert set(artifacts) == expected[kind], (task_id, artifacts)
            assert [s["percentage"] for s in status["steps"]] == [100.0] * len(status["steps"])
            assert len(status["steps"]) >= 3
            for ref in artifacts.values():
                data = (server.workspace / kind / task_id / ref["path"]).read_bytes()
                assert ref["size"] == len(data) > 0
                assert ref["sha256"] == hashlib.sha256(data).hexdigest()


def test_the_report_compares_both_runs_and_embeds_its_figures(research: dict[str, Any]) -> None:
    server, final = research["server"], research["final"]
    folder = server.workspace / "analysis" / final
    report = (folder / "report.md").read_text()
    assert "| rank | run |" in report and "ridge" in report and "random_forest" in report
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert images == ["figures/comparison.png", "figures/backtest-1.png", "figures/backtest-2.png"]
    for image in images:
        assert (folder / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads(
        (
            server.workspace / "train" / tasks_by_kind(server, final)["train"][0] / "metrics.json"
        ).read_text()
    )
    assert {"cv_r2", "train_r2", "params", "model"} <= set(metrics)


def test_a_failed_upstream_fails_its_downstream_clearly(research: dict[str, Any]) -> None:
    server = research["server"]
    etl = run_task(server, "research_etl", min_rows=100_000)
    assert etl["state"] == "failed"
    assert "fewer than min_rows=100000" in etl["error"]
    train = run_task(server, "research_train", source_tasks=etl["task_id"])
    assert train["state"] == "failed"
    assert train["error"].startswith(f"UpstreamError: Upstream task {etl['task_id']} of ")
    assert "failed: ValueError: only" in train["error"]


def test_a_deleted_upstream_and_grandparent_fail_clearly(research: dict[str, Any]) -> None:
    server = research["server"]
    etl = run_task(server, "research_etl", dataset="wine", test_fraction=0.3)
    assert etl["state"] == "succeeded", etl
    train = run_task(server, "research_train", source_tasks=etl["task_id"], cv_folds=2)
    assert train["state"] == "succeeded", train
    assert answer(server, "delete_tasks", task_ids=[etl["task_id"]]) == [etl["task_id"]]
    again = run_task(server, "research_train", source_tasks=etl["task_id"])
    assert again["state"] == "failed"
    assert (
        f"UpstreamError: Upstream task {etl['task_id']} of {again['task_id']} is missing (deleted"
        in again["error"]
    )
    backtest = run_task(server, "research_backtest", source_tasks=train["task_id"])
    assert backtest["state"] == "failed"
    assert backtest["error"].startswith(
        f"UpstreamError: Upstream task {etl['task_id']} of {train['task_id']} is missing"
    )


def test_no_upstream_of_the_right_kind_is_a_clear_error(research: dict[str, Any]) -> None:
    server = research["server"]
    demo = run_task(server, "demo", x=1, y=2)
    report = run_task(server, "research_report", source_tasks=demo["task_id"])
    assert report["state"] == "failed"
    assert (
        "needs 1 to 8 upstream research_backtest task(s) in source_tasks, got 0" in report["error"]
    )


def test_a_changed_upstream_artifact_is_refused(research: dict[str, Any]) -> None:
    """A model file replaced after it was recorded is never unpickled."""
    server = research["server"]
    etl = run_task(server, "research_etl")
    train = run_task(server, "research_train", source_tasks=etl["task_id"], cv_folds=2)
    model = server.workspace / "train" / train["task_id"] / "model.pkl"
    marker = server.root / "pwned-by-pickle"
    model.write_bytes(f"cos\nsystem\n(S'touch {marker}'\ntR.".encode())
    backtest = run_task(server, "research_backtest", source_tasks=train["task_id"])
    assert backtest["state"] == "failed"
    assert "no longer matches its recorded size and sha256" in backtest["error"]
    assert not marker.exists()


def test_the_parquet_preview_answers_the_first_rows(research: dict[str, Any]) -> None:
    server, final = research["server"], research["final"]
    (etl,) = tasks_by_kind(server, final)["etl"]
    reply = preview(server, etl, "train.parquet", limit=5)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    names = [c["name"] for c in body["columns"]]
    assert names[:3] == ["age", "sex", "bmi"] and names[-1] == "target"
    assert len(body["rows"]) == 5 and all(len(r) == len(names) for r in body["rows"])
    metadata = answer(server, "status", task_id=etl)["result"]
    assert body["total_rows"] == metadata["rows_train"] > 5
    assert body["truncated"] == {"rows": True, "columns": False}
    assert preview(server, etl, "train.parquet", limit=0).status_code == 422
    assert preview(server, etl, "train.parquet", limit=501).status_code == 422
    not_parquet = preview(server, etl, "schema.json")
    assert not_parquet.status_code == 422 and not_parquet.json()["error"]["code"] == "not_parquet"
    assert preview(server, etl, "nope.parquet").status_code == 404
    assert preview(server, "etl#research_etl#nope", "train.parquet").status_code == 404


def test_the_preview_refuses_links_and_hidden_names(research: dict[str, Any]) -> None:
    server, final = research["server"], research["final"]
    (etl,) = tasks_by_kind(server, final)["etl"]
    folder = server.workspace / "etl" / etl
    secret = server.root / "secret.parquet"
    secret.write_bytes((folder / "test.parquet").read_bytes())
    (folder / "link.parquet").symlink_to(secret)
    (folder / "inner").symlink_to(server.root)
    os.link(secret, folder / "hard.parquet")
    (folder / ".hidden.parquet").write_bytes(secret.read_bytes())
    for path in ("link.parquet", "inner/secret.parquet", "hard.parquet", ".hidden.parquet"):
        reply = preview(server, etl, path)
        assert reply.status_code == 400, (path, reply.text)
        assert reply.json()["error"]["code"] == "unsafe_path"
        assert "rows" not in reply.text
    assert preview(server, etl, "..%2F..%2Fsecret.parquet").status_code in (400, 404)


def test_a_run_token_previews_no_other_sessions_task(research: dict[str, Any]) -> None:
    server, final = research["server"], research["final"]
    (etl,) = tasks_by_kind(server, final)["etl"]
    missing = "etl#research_etl#no-such-task"
    with api(server, timeout=60) as client:
        session = new_session(client)
        run = create_run(client, session, "token\nwait-for go\nanswer done", package="probe")
        token = wait_file(client, run["id"], "token").decode()
        try:
            replies = {}
            for task_id in (etl, missing):
                with httpx.Client(base_url=server.url, timeout=30) as tcp:
                    replies[task_id] = tcp.get(
                        f"/api/v1/tasks/{quote(task_id, safe='')}/preview/train.parquet",
                        headers={"authorization": f"Bearer {token}"},
                    )
        finally:
            (server.workspace / "agent" / "session-state" / session / "go").touch()
            assert wait_run(client, run["id"])["state"] == "succeeded"
    seen, absent = replies[etl], replies[missing]
    assert seen.status_code == absent.status_code == 404, seen.text
    assert seen.text == absent.text.replace(missing, etl)
    assert preview(server, etl, "train.parquet").status_code == 200  # the admin still sees it


def test_without_pyarrow_the_preview_says_so(tmp_path: Path) -> None:
    """pyarrow is optional for runyard: a server that cannot import it answers 501."""
    shadow = tmp_path / "shadow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('pyarrow is shadowed here')\n")
    server = start_server(tmp_path / "srv", env={"PYTHONPATH": str(shadow.parent)})
    try:
        folder = server.workspace / "etl" / "etl#seeded#parquet"
        folder.mkdir(parents=True)
        (folder / "t.parquet").write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
        reply = preview(server, "etl#seeded#parquet", "t.parquet")
        assert reply.status_code == 501, reply.text
        assert reply.json()["error"]["code"] == "preview_unavailable"
        assert "pip install pyarrow" in reply.json()["error"]["message"]
    finally:
        server.stop()


def test_training_is_tracked_and_the_models_compared(research: dict[str, Any]) -> None:
    """Each fold's R² is a step of cv_r2 and the model a logged param; the report and the
    analysis task compare the models through the compare API's function; the CLI prints
    a login link to the Studio's compare view of them."""
    server, final = research["server"], research["final"]
    trains = sorted(tasks_by_kind(server, final)["train"])
    with server.client() as client:
        for task_id in trains:
            reply = client.get(f"/api/v1/tasks/{quote(task_id, safe='')}/metrics")
            assert reply.status_code == 200, reply.text
            metrics = reply.json()["runs"][0]["metrics"]
            assert metrics["cv_r2"]["steps"] == [1, 2, 3, 4, 5]
            assert set(metrics) == {"cv_r2", "cv_r2_mean", "train_r2"}
        compared = client.get("/api/v1/compare", params=[("id", t) for t in trains]).json()
    first = compared["params"][0]
    assert first["differs"] and {"model", "max_depth"} <= {
        row["name"] for row in compared["params"] if row["differs"]
    }
    assert {item["params"]["model"] for item in compared["items"]} == {"ridge", "random_forest"}
    route = "/compare?ids=" + quote(",".join(sorted(trains, reverse=True)), safe="")
    assert re.fullmatch(
        rf"{re.escape(server.url)}/#login=[\w%-]+&to={re.escape(route)}", research["compare"]
    ), research["compare"]
    report = (server.workspace / "analysis" / final / "report.md").read_text()
    assert "## Training runs" in report and f"`#{route}`" in report
    assert re.search(r"\| model \| \"(ridge|random_forest)\" \|", report), report
    assert "(5 folds)" in report
    analysis = run_task(server, "research_analysis", source_tasks=",".join(trains))
    assert analysis["state"] == "succeeded", analysis
    summary = json.loads((server.workspace / "analysis" / analysis["task_id"] / "summary.json")
                         .read_text())  # fmt: skip
    models = summary["models"]
    assert [m["cv_r2"] for m in models] == sorted((m["cv_r2"] for m in models), reverse=True)
    assert all(m["cv_r2_folds"] == 5 and m["cv_r2_min"] <= m["cv_r2_max"] for m in models)
    assert "model" in {row["name"] for row in summary["differing_params"]}
    assert summary["studio_compare"].startswith("/compare?ids=")
