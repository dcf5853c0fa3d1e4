"""MLflow's own client (mlflow-skinny from PyPI) against a real server's ``/mlflow`` routes.

The client runs in a subprocess (it is slow to import, and its imports warn), with
``MLFLOW_TRACKING_URI=<server>/mlflow`` and ``MLFLOW_TRACKING_TOKEN`` as a user sets them;
each script prints one ``RESULT:`` line of JSON that the test reads.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from runyard.tracking.reading import read_params, read_points
from serverproc import ServerProcess, start_server

pytest.importorskip("mlflow", reason="the test extra installs mlflow-skinny")

TOKEN = "mlflow-client-token"
PREAMBLE = """
import json, os, sys, tempfile
import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
def result(value):
    print("RESULT:" + json.dumps(value, default=str))
"""
LOGGING_SCRIPT = """
mlflow.set_experiment("mlf_sweep")
with mlflow.start_run(run_name="ridge-c1") as run:
    mlflow.log_param("model", "ridge")
    mlflow.log_params({"C": 1, "fold_count": 5})
    for step in range(100):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
    mlflow.log_metrics({"cv_r2": 0.75, "odd": float("nan")}, step=3)
    mlflow.set_tag("team", "research")
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "weights.txt")
    with open(path, "w") as fh:
        fh.write("w=0.5")
    mlflow.log_artifact(path)
    mlflow.log_artifact(path, artifact_path="models/final")
client = MlflowClient()
run_id = run.info.run_id
got = client.get_run(run_id)
history = client.get_metric_history(run_id, "loss")
listed = [a.path for a in client.list_artifacts(run_id)]
nested = [a.path for a in client.list_artifacts(run_id, "models/final")]
fetched = client.download_artifacts(run_id, "models/final/weights.txt", tempfile.mkdtemp())
found = mlflow.search_runs(
    experiment_names=["mlf_sweep"],
    filter_string="metrics.cv_r2 > 0.5 AND params.model = 'ridge' AND tags.team = 'research'",
    output_format="list",
)
missed = mlflow.search_runs(
    experiment_names=["mlf_sweep"], filter_string="metrics.cv_r2 > 0.9", output_format="list"
)
result({
    "run_id": run_id, "status": got.info.status, "name": got.info.run_name,
    "params": got.data.params, "tags": got.data.tags, "metrics": got.data.metrics,
    "history": [[m.step, m.value] for m in history],
    "listed": listed, "nested": nested, "fetched": open(fetched).read(),
    "found": [r.info.run_id for r in found], "missed": [r.info.run_id for r in missed],
})
"""


def run_client(
    srv: ServerProcess, script: str, token: str | None = TOKEN, timeout: float = 180
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RUNYARD_"))}
    env.update(
        MLFLOW_TRACKING_URI=srv.url + "/mlflow",
        MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
        MLFLOW_HTTP_REQUEST_TIMEOUT="30",
    )
    if token is not None:
        env["MLFLOW_TRACKING_TOKEN"] = token
    code = textwrap.dedent(PREAMBLE) + textwrap.dedent(script)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
        cwd=srv.root,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT:"):
            return json.loads(line[len("RESULT:") :])
    raise AssertionError(f"the client printed no result:\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("mlflow") / "srv", token=TOKEN)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def logged(srv: ServerProcess) -> dict[str, Any]:
    return run_client(srv, LOGGING_SCRIPT)


def test_a_run_logged_through_mlflow_reads_back_through_mlflow(logged: dict[str, Any]) -> None:
    assert logged["status"] == "FINISHED"
    assert logged["name"] == "ridge-c1"
    assert logged["history"] == [[step, 1.0 / (step + 1)] for step in range(100)]
    assert logged["params"] == {"model": "ridge", "C": "1", "fold_count": "5"}
    assert logged["tags"]["team"] == "research"
    assert logged["tags"]["mlflow.runName"] == "ridge-c1"
    assert logged["tags"]["runyard.task_id"] == "base#mlf_sweep#ridge-c1"
    assert logged["metrics"]["loss"] == pytest.approx(0.01)
    assert logged["metrics"]["cv_r2"] == 0.75
    assert math.isnan(logged["metrics"]["odd"])
    assert logged["listed"] == ["models", "weights.txt"]  # the records are no artifacts
    assert logged["nested"] == ["models/final/weights.txt"]
    assert logged["fetched"] == "w=0.5"
    assert logged["found"] == [logged["run_id"]]
    assert logged["missed"] == []


def test_the_run_is_a_runyard_task_with_its_metrics_params_and_files(
    srv: ServerProcess, logged: dict[str, Any]
) -> None:
    task_id = "base#mlf_sweep#ridge-c1"
    folder = srv.workspace / "base" / task_id
    status = json.loads((folder / "status.json").read_text())
    assert status["run_id"] == logged["run_id"]
    assert status["state"] == "succeeded"
    assert status["tracked"]["by"] == "mlflow"
    assert status["metrics"]["loss"] == {
        "last": 0.01, "min": 0.01, "max": 1.0, "step": 99, "count": 100,
    }  # fmt: skip
    assert status["metrics"]["odd"]["last"] == "NaN"
    assert status["params"] == {"model": "ridge", "C": "1", "fold_count": "5"}
    loss = read_points(folder, name="loss")
    assert [(p.step, p.value) for p in loss] == [(s, 1.0 / (s + 1)) for s in range(100)]
    assert read_params(folder) == {"model": "ridge", "C": "1", "fold_count": "5"}
    quoted = quote(task_id, safe="")
    with srv.client() as client:
        files = client.get(f"/api/v1/tasks/{quoted}/files").json()["items"]
        paths = {item["path"] for item in files}
        assert {"weights.txt", "models/final/weights.txt"} <= paths
        reply = client.get(f"/api/v1/tasks/{quoted}/files/models/final/weights.txt")
        assert reply.status_code == 200 and reply.content == b"w=0.5"
        metrics = client.get(f"/api/v1/tasks/{quoted}/metrics")
    assert metrics.status_code == 200, metrics.text
    (run,) = metrics.json()["runs"]
    assert run["run_id"] == logged["run_id"] and run["state"] == "succeeded"
    assert run["metrics"]["loss"]["steps"] == list(range(100))
    assert run["metrics"]["loss"]["values"] == [1.0 / (s + 1) for s in range(100)]
    assert run["metrics"]["odd"]["values"] == ["NaN"]


def test_search_runs_and_get_metric_history_read_runyard_own_tasks(srv: ServerProcess) -> None:
    submitted = srv.call("submit", task="demo", x=3, y=4, task_name="mlf-own")["answer"]
    srv.call("wait_task", task_id=submitted["task_id"], run_id=submitted["run_id"])
    script = """
    runs = mlflow.search_runs(
        experiment_names=["demo"], filter_string="params.x = '3' AND attributes.status = 'FINISHED'",
        output_format="list",
    )
    client = MlflowClient()
    names = [e.name for e in client.search_experiments()]
    refused = None
    try:
        client.log_metric(runs[0].info.run_id, "injected", 1.0)
    except MlflowException as exc:
        refused = exc.error_code
    with mlflow.start_run() as unnamed:  # no experiment set, no name given
        mlflow.log_metric("m", 1.0)
    result({"runs": [[r.info.run_id, r.data.params, r.info.run_name] for r in runs],
            "experiments": names, "refused": refused,
            "unnamed": [unnamed.info.experiment_id, unnamed.info.run_name,
                        client.get_run(unnamed.info.run_id).data.tags["runyard.task_id"]]})
    """
    answer = run_client(srv, script)
    params = {"x": "3", "y": "4", "fail": "false"}  # its inputs, as JSON text
    assert answer["runs"] == [[submitted["run_id"], params, "mlf-own"]]
    assert {"Default", "demo"} <= set(answer["experiments"])
    # a run runyard ran is its worker's to record: MLflow's client only reads it
    assert answer["refused"] == "INVALID_STATE"
    experiment_id, run_name, task_id = answer["unnamed"]
    assert experiment_id == "0"  # MLflow's Default experiment: the task name mlflow-default
    assert re.fullmatch(r"[a-z]+-[a-z]+-\d+", run_name), run_name  # generated, readable
    assert task_id == f"base#mlflow-default#{run_name}"


def test_a_wrong_token_makes_the_client_raise(srv: ServerProcess) -> None:
    script = """
    try:
        mlflow.search_experiments()
        result({"raised": None})
    except MlflowException as exc:
        result({"raised": exc.error_code})
    """
    assert run_client(srv, script, token="not-the-token")["raised"] == "UNAUTHENTICATED"
    assert run_client(srv, script, token=None)["raised"] == "UNAUTHENTICATED"
    reply = httpx.get(srv.url + "/mlflow/api/2.0/mlflow/experiments/search")
    assert reply.status_code == 401
    assert reply.json()["error_code"] == "UNAUTHENTICATED"


def _artifacts_url(srv: ServerProcess, run_id: str, path: str) -> str:
    return (
        f"{srv.url}/mlflow/api/2.0/mlflow-artifacts/artifacts/mlf_sweep/{run_id}/artifacts/{path}"
    )


def test_artifact_paths_that_leave_the_run_folder_are_refused(
    srv: ServerProcess, logged: dict[str, Any], tmp_path: Path
) -> None:
    run_id = logged["run_id"]
    folder = srv.workspace / "base" / "base#mlf_sweep#ridge-c1"
    with srv.client() as client:
        reopened = client.post(
            "/mlflow/api/2.0/mlflow/runs/update", json={"run_id": run_id, "status": "RUNNING"}
        )
        assert reopened.status_code == 200, reopened.text
        outside = tmp_path / "outside"
        outside.mkdir()
        (folder / "escape").symlink_to(outside)
        for path in (
            "%2e%2e/%2e%2e/%2e%2e/escaped.txt",  # .. once decoded
            "models/%2e%2e/%2e%2e/escaped.txt",
            "%2Fetc%2Fescaped.txt",  # an absolute path
            "escape/escaped.txt",  # through a symlink in the run folder
            "status.json",  # a record of the run
            "metrics.jsonl",
            ".worker.lock",  # hidden
            "a%5Cb.txt",  # a backslash
        ):
            reply = client.put(
                _artifacts_url(srv, run_id, path),
                content=b"pwned",
                headers={"content-type": "text/plain"},
            )
            assert reply.status_code == 400, (path, reply.text)
            assert reply.json()["error_code"] == "INVALID_PARAMETER_VALUE", path
        read = client.get(_artifacts_url(srv, run_id, "%2e%2e/%2e%2e/server.json"))
        assert read.status_code == 400 and TOKEN not in read.text
        ok = client.put(
            _artifacts_url(srv, run_id, "notes.md"), content=b"# ok",
            headers={"content-type": "text/markdown"},
        )  # fmt: skip
        assert ok.status_code == 200, ok.text
        client.post(
            "/mlflow/api/2.0/mlflow/runs/update", json={"run_id": run_id, "status": "FINISHED"}
        )
    assert list(outside.iterdir()) == []
    assert not list(srv.root.rglob("escaped.txt"))
    assert json.loads((folder / "status.json").read_text())["state"] == "succeeded"
    assert (folder / "notes.md").read_bytes() == b"# ok"
    assert "pwned" not in (folder / "metrics.jsonl").read_text()


def test_bad_requests_answer_mlflow_errors_never_500(srv: ServerProcess) -> None:
    base = "/mlflow/api/2.0/mlflow"
    with srv.client() as client:
        cases = [
            (
                "post",
                "/runs/search",
                {"experiment_ids": ["0"], "filter": "metrics.a > 1 OR metrics.b < 2"},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            (
                "post",
                "/runs/search",
                {"experiment_ids": ["0"], "filter": "datasets.name = 'x'"},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            ("post", "/experiments/create", {"name": "has space"}, 400, "INVALID_PARAMETER_VALUE"),
            ("post", "/experiments/create", {"name": "demo"}, 400, "RESOURCE_ALREADY_EXISTS"),
            ("post", "/runs/create", {"experiment_id": "demo"}, 400, "INVALID_PARAMETER_VALUE"),
            ("post", "/runs/create", {"experiment_id": "nope"}, 404, "RESOURCE_DOES_NOT_EXIST"),
            (
                "post",
                "/runs/create",
                {"experiment_id": "0", "run_name": "../x"},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            ("get", "/runs/get?run_id=" + "f" * 32, None, 404, "RESOURCE_DOES_NOT_EXIST"),
            ("get", "/runs/get?run_id=../../x", None, 404, "RESOURCE_DOES_NOT_EXIST"),
            (
                "post",
                "/runs/log-batch",
                {"run_id": "f" * 32, "metrics": "x"},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            (
                "post",
                "/runs/log-metric",
                {"run_id": "f" * 32, "key": "/bad", "value": 1, "timestamp": 1},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            ("post", "/runs/search", [1, 2], 400, "INVALID_PARAMETER_VALUE"),
            (
                "post",
                "/runs/log-metric",
                {"run_id": "f" * 32, "key": "a", "value": 1, "timestamp": 10**400},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            (
                "post",
                "/runs/log-metric",
                {"run_id": "f" * 32, "key": "a", "value": 10**400, "timestamp": 1},
                400,
                "INVALID_PARAMETER_VALUE",
            ),  # noqa: E501
            (
                "post",
                "/runs/update",
                {"run_id": "f" * 32, "status": "RUNNING", "end_time": 10**400},
                404,
                "RESOURCE_DOES_NOT_EXIST",
            ),  # noqa: E501
            ("post", "/model-versions/create", {}, 404, "ENDPOINT_NOT_FOUND"),
        ]
        for method, path, body, status, code in cases:
            kwargs = {"json": body} if body is not None else {}
            reply = getattr(client, method)(base + path, **kwargs)
            assert reply.status_code == status, (path, body, reply.text)
            assert reply.json()["error_code"] == code, (path, body, reply.text)


def test_an_open_mlflow_run_survives_a_server_restart(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    first = start_server(root, token=TOKEN)
    try:
        opened = run_client(first, """
        client = MlflowClient()
        experiment = client.create_experiment("mlf_restart")
        run = client.create_run(experiment, run_name="long")
        client.log_metric(run.info.run_id, "loss", 0.5, step=0)
        forgotten = client.create_run(experiment, run_name="forgotten")
        result({"run_id": run.info.run_id, "forgotten": forgotten.info.run_id})
        """)  # fmt: skip
    finally:
        first.stop()
    second = start_server(root, token=TOKEN)
    try:
        task_id = "base#mlf_restart#long"
        with second.client() as client:
            status = client.post("/jobs/status", json={"arguments": {"task_id": task_id}})
            assert status.json()["answer"]["state"] == "running", status.text
        ended = run_client(second, f"""
        client = MlflowClient()
        client.log_metric("{opened['run_id']}", "loss", 0.25, step=1)
        client.set_terminated("{opened['run_id']}")
        run = client.get_run("{opened['run_id']}")
        result({{"status": run.info.status,
                 "history": [m.value for m in client.get_metric_history(run.info.run_id, "loss")]}})
        """)  # fmt: skip
        assert ended == {"status": "FINISHED", "history": [0.5, 0.25]}
        # runyard's cancel ends a run MLflow's client left open: no worker to signal
        assert second.call("cancel", task_id="base#mlf_restart#forgotten")["answer"] is True
        killed = run_client(second, f"""
        result({{"status": MlflowClient().get_run("{opened['forgotten']}").info.status}})
        """)  # fmt: skip
        assert killed == {"status": "KILLED"}
        final = json.loads((second.workspace / "base" / task_id / "status.json").read_text())
        assert final["state"] == "succeeded" and final["error"] == ""
    finally:
        second.stop()


def test_a_run_is_not_opened_on_a_disk_below_min_free_mb(tmp_path: Path) -> None:
    low = start_server(tmp_path / "srv", token=TOKEN, config={"min_free_mb": 10**9})
    try:
        with low.client() as client:
            reply = client.post("/mlflow/api/2.0/mlflow/runs/create", json={"experiment_id": "0"})
        assert reply.status_code == 507, reply.text
        assert reply.json()["error_code"] == "RESOURCE_EXHAUSTED"
        assert not (low.workspace / "base").exists() or not list(
            (low.workspace / "base").glob("base#mlflow-default#*")
        )
    finally:
        low.stop()


def test_experiments_tags_and_params_follow_mlflow_rules(srv: ServerProcess) -> None:
    base = "/mlflow/api/2.0/mlflow"
    with srv.client() as client:
        made = client.post(
            f"{base}/experiments/create",
            json={"name": "mlf_rules", "tags": [{"key": "owner", "value": "ana"}]},
        )
        assert made.json() == {"experiment_id": "mlf_rules"}, made.text
        tagged = client.post(
            f"{base}/experiments/set-experiment-tag",
            json={"experiment_id": "mlf_rules", "key": "stage", "value": "dev"},
        )
        assert tagged.status_code == 200, tagged.text
        got = client.get(f"{base}/experiments/get", params={"experiment_id": "mlf_rules"})
        tags = {t["key"]: t["value"] for t in got.json()["experiment"]["tags"]}
        assert tags == {"owner": "ana", "stage": "dev"}
        found = client.post(
            f"{base}/experiments/search", json={"filter": "name LIKE 'mlf_r%'"}
        ).json()
        assert [e["name"] for e in found["experiments"]] == ["mlf_rules"]
        by_name = client.post(f"{base}/experiments/search", json={"order_by": ["name DESC"]})
        listed = [e["name"] for e in by_name.json()["experiments"]]
        assert listed == sorted(listed, reverse=True) and "mlf_rules" in listed
        pages, token = [], None
        while True:
            answer = client.post(
                f"{base}/experiments/search", json={"max_results": 2, "page_token": token}
            ).json()
            pages.append([e["name"] for e in answer["experiments"]])
            token = answer.get("next_page_token")
            if not token:
                break
        names = [name for page in pages for name in page]
        assert names[0] == "Default" and "mlf_rules" in names and len(set(names)) == len(names)
        run = client.post(
            f"{base}/runs/create", json={"experiment_id": "mlf_rules", "run_name": "p1"}
        ).json()["run"]["info"]["run_id"]
        batch = {"run_id": run, "params": [{"key": "alpha", "value": "0.1"}]}
        assert client.post(f"{base}/runs/log-batch", json=batch).status_code == 200
        assert client.post(f"{base}/runs/log-batch", json=batch).status_code == 200  # same
        changed = {"run_id": run, "params": [{"key": "alpha", "value": "0.2"}]}
        refused = client.post(f"{base}/runs/log-batch", json=changed)
        assert refused.status_code == 400
        assert "Changing param values is not allowed" in refused.json()["message"]
        taken = client.post(
            f"{base}/runs/create", json={"experiment_id": "mlf_rules", "run_name": "p1"}
        )
        assert taken.json()["error_code"] == "RESOURCE_ALREADY_EXISTS"  # still running
        ended = client.post(f"{base}/runs/update", json={"run_id": run, "status": "FINISHED"})
        assert ended.json()["run_info"]["status"] == "FINISHED"
        again = client.post(
            f"{base}/runs/create", json={"experiment_id": "mlf_rules", "run_name": "p1"}
        ).json()["run"]["info"]["run_id"]
        assert again != run
        earlier = client.get(f"{base}/runs/get", params={"run_id": run}).json()["run"]
        assert earlier["info"]["status"] == "FINISHED"  # kept as the task's history
        assert earlier["data"]["params"] == [{"key": "alpha", "value": "0.1"}]
        write_kept = client.post(
            f"{base}/runs/set-tag", json={"run_id": run, "key": "k", "value": "v"}
        )
        assert write_kept.json()["error_code"] == "INVALID_STATE"


JUNK_BODIES: list[dict[str, Any]] = [
    {}, {"run_id": 1}, {"experiment_id": []}, {"experiment_ids": [1, None]},
    {"experiment_ids": "0", "filter": 1}, {"experiment_ids": ["0"], "order_by": [1]},
    {"experiment_ids": ["0"], "max_results": -1}, {"experiment_ids": ["0"], "page_token": 5},
    {"name": 5}, {"name": "x" * 300}, {"experiment_id": "0", "tags": "x"},
    {"experiment_id": "0", "tags": [{"key": 1}]}, {"experiment_id": "0", "run_name": 7},
    {"metrics": [1]}, {"params": [{"key": "a", "value": 1}]}, {"key": None, "value": None},
    {"status": 5}, {"end_time": "x"}, {"metric_key": ["a"]}, {"experiment_name": {}},
    {"view_type": "X"}, {"order_by": ["name DESC DESC"]}, {"order_by": ["name"]},
    {"max_results": "1e5"},
    {"experiment_ids": ["0"], "filter": "metrics.`a` > 1e999"},
]  # fmt: skip
MLFLOW_ROUTES = [
    "experiments/get-by-name", "experiments/get", "experiments/create", "experiments/search",
    "experiments/set-experiment-tag", "runs/create", "runs/update", "runs/get",
    "runs/log-metric", "runs/log-parameter", "runs/log-batch", "runs/set-tag",
    "runs/delete-tag", "runs/search", "metrics/get-history",
]  # fmt: skip


def test_junk_sent_to_every_route_gets_an_mlflow_error_never_a_500(
    srv: ServerProcess, logged: dict[str, Any]
) -> None:
    """Each route, by GET and POST, with each junk body alone and aimed at a real run."""
    bodies = JUNK_BODIES + [{"run_id": logged["run_id"], **b} for b in JUNK_BODIES]
    failures = []
    with srv.client() as client:
        for route, body in itertools.product(MLFLOW_ROUTES, bodies):
            query = {k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}
            for reply in (
                client.get(f"/mlflow/api/2.0/mlflow/{route}", params=query),
                client.post(f"/mlflow/api/2.0/mlflow/{route}", json=body),
            ):
                if reply.status_code >= 500 or (
                    reply.status_code >= 400 and "error_code" not in reply.json()
                ):
                    failures.append((reply.request.method, route, body, reply.text[:200]))
    assert failures == []


def test_asynchronous_logging_reads_back_by_step(srv: ServerProcess) -> None:
    answer = run_client(srv, """
    mlflow.set_experiment("mlf_async")
    with mlflow.start_run(run_name="async") as run:
        for step in range(300):
            mlflow.log_metric("loss", float(step), step=step, synchronous=False)
    history = MlflowClient().get_metric_history(run.info.run_id, "loss")
    result([[m.step, m.value] for m in history])
    """)  # fmt: skip
    assert answer == [[step, float(step)] for step in range(300)]
