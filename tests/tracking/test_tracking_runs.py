"""Metrics and params logged by real tasks on a real server: read back in order, summarised
in the status, non-finite values served as strings, other processes' lines taken."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tracking_support import submit, tracking_server, wait_end

from runyard.tracking.points import METRICS_ENV
from runyard.tracking.reading import read_points, run_params
from runyard.wire import TaskStatus
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, read_sse


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = tracking_server(tmp_path_factory.mktemp("tracking"))
    try:
        yield proc
    finally:
        proc.stop()


def task_dir(server: ServerProcess, task_id: str) -> Path:
    return Workspace.open(server.workspace, server.log_dir).task_dir(task_id)


def run_log(server: ServerProcess, task_id: str) -> str:
    answer = server.call("read_task_log", task_id=task_id, limit=262144)["answer"]
    return answer["content"]


def test_three_metrics_over_1000_steps_read_back_in_order(server: ServerProcess) -> None:
    handle = submit(server, "tracked_steps", steps=1000, lr=0.05, model="lasso")
    status = wait_end(server, handle["task_id"])
    assert status["state"] == "succeeded", status
    points = read_points(task_dir(server, handle["task_id"]))
    assert len(points) == 3000
    for name in ("loss", "acc", "val/loss"):
        mine = [p for p in points if p.name == name]
        assert [p.step for p in mine] == list(range(1000))
        assert [p.time for p in mine] == sorted(p.time for p in mine)
    assert [p.value for p in points if p.name == "loss"] == [1.0 / (s + 1) for s in range(1000)]
    summary = status["metrics"]
    assert summary["loss"] == {"last": 0.001, "min": 0.001, "max": 1.0, "step": 999,
                               "count": 1000}
    assert summary["acc"]["last"] == 0.999 and summary["val/loss"]["min"] == 1.001
    # the params: its inputs (less task_name and source_tasks) updated with the logged ones
    assert status["params"] == {"lr": 0.5, "optimizer": "adam", "layers": 3}
    params = run_params(TaskStatus.model_validate(status), status["params"])
    assert params == {"lr": 0.5, "model": "lasso", "steps": 1000, "non_finite": False,
                      "optimizer": "adam", "layers": 3}
    logged = json.loads((task_dir(server, handle["task_id"]) / "params.json").read_text())
    assert logged == status["params"]


def test_non_finite_values_are_strings_in_every_answer(server: ServerProcess) -> None:
    handle = submit(server, "tracked_steps", steps=3, non_finite=True)
    task_id = handle["task_id"]
    status = wait_end(server, task_id)
    expected = {"last": "-Infinity", "min": "-Infinity", "max": "Infinity", "step": 2,
                "count": 3}
    assert status["metrics"]["odd"] == expected
    assert status["metrics"]["all_nan"] == {"last": "NaN", "min": None, "max": None,
                                            "step": 0, "count": 1}
    with server.client() as client:
        for path in (f"/api/v1/tasks/{quote(task_id, safe='')}/runs", "/api/v1/tasks"):
            reply = client.get(path)
            assert reply.status_code == 200, reply.text
            strict(reply.text)
        ids = {"task_id": task_id, "run_id": handle["run_id"]}
        for job, arguments in (("list_task_statuses", {}), ("status", ids), ("wait_task", ids)):
            reply = client.post(f"/jobs/{job}", json={"arguments": arguments})
            assert reply.status_code == 200, reply.text
            strict(reply.text)
        assert strict(reply.text)["answer"]["metrics"]["odd"] == expected
        with client.stream("POST", "/jobs/stream_task/events?metrics=true",
                           json={"arguments": {"task_id": task_id}}) as stream:
            assert stream.status_code == 200
            events = read_sse(stream.iter_lines())
    metric_values = [p["value"] for e in events if e["event"] == "metric"
                     for p in e["data"]["points"] if p["name"] == "odd"]
    assert metric_values == ["NaN", "Infinity", "-Infinity"]
    assert events[-1]["data"]["answer"]["metrics"]["odd"] == expected
    assert anyio.run(mcp_status, server, task_id)["metrics"]["odd"] == expected


def strict(text: str) -> Any:
    """JSON as a browser's JSON.parse reads it: a bare NaN or Infinity token fails."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in {text[:200]}"))


async def mcp_status(server: ServerProcess, task_id: str) -> dict[str, Any]:
    async with (
        create_mcp_http_client(headers=server.headers) as http,
        streamable_http_client(server.url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("status", {"task_id": task_id})
        text = result.content[0].text  # type: ignore[union-attr]
        return strict(text)["answer"]


COMMAND = (
    'echo \'{"name": "loss", "value": 0.5}\' >> "$RUNYARD_METRICS_FILE"; '
    'echo \'{"name": "loss", "value": 0.25}\' >> "$RUNYARD_METRICS_FILE"; '
    'echo "this is garbage" >> "$RUNYARD_METRICS_FILE"; '
    'echo \'{"name": "acc", "value": "NaN", "step": 7}\' >> "$RUNYARD_METRICS_FILE"; '
    'sleep 0.8; '
    'printf \'{"name": "late", "value": 1e400}\' >> "$RUNYARD_METRICS_FILE"'
)


def test_a_command_task_logs_through_the_metrics_file(server: ServerProcess) -> None:
    handle = submit(server, "command", command=COMMAND, shell=True)
    status = wait_end(server, handle["task_id"])
    assert status["state"] == "succeeded", status
    points = read_points(task_dir(server, handle["task_id"]))
    assert [(p.name, p.step) for p in points] == [("loss", 0), ("loss", 1), ("acc", 7),
                                                   ("late", 0)]
    assert math.isnan(points[2].value) and points[3].value == math.inf
    assert status["metrics"]["loss"]["last"] == 0.25
    assert status["metrics"]["late"]["last"] == "Infinity"
    log = run_log(server, handle["task_id"])
    assert "metrics: line 3 refused: not JSON" in log
    assert METRICS_ENV not in status["config"]
    # what the run logged is its record, read through the tracking routes: no artifact
    assert not {"metrics.jsonl", "params.json"} & set(status["result"]["artifacts"])


def test_a_bad_metric_is_an_error_the_task_sees(server: ServerProcess) -> None:
    for what, message in (("name", "invalid metric name"), ("value", "must be a number")):
        handle = submit(server, "tracked_bad", what=what)
        status = wait_end(server, handle["task_id"])
        assert status["state"] == "succeeded" and status["result"]["logged"] == 1, status
        assert message in run_log(server, handle["task_id"])
        assert list(status["metrics"]) == ["kept"]


def events_as_they_come(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    block: list[str] = []
    for line in lines:
        if line == "":
            yield from read_sse(iter(block))
            block = []
        else:
            block.append(line)


def stream(server: ServerProcess, task_id: str, query: str = "?metrics=true",
           last_id: str | None = None) -> list[dict[str, Any]]:
    headers = {"last-event-id": last_id} if last_id else {}
    with server.client() as client, client.stream(
        "POST", f"/jobs/stream_task/events{query}", json={"arguments": {"task_id": task_id}},
        headers=headers,
    ) as reply:
        assert reply.status_code == 200, reply.read()
        return read_sse(reply.iter_lines())


def steps_of(events: list[dict[str, Any]]) -> list[int]:
    return [p["step"] for e in events if e["event"] == "metric" for p in e["data"]["points"]]


def test_metric_events_arrive_live_and_resume(server: ServerProcess) -> None:
    handle = submit(server, "tracked_slow", points=30, every=0.1, hold=0.5)
    task_id = handle["task_id"]
    seen: list[dict[str, Any]] = []
    states_at_first = None
    with server.client() as client, client.stream(
        "POST", "/jobs/stream_task/events?metrics=true",
        json={"arguments": {"task_id": task_id}},
    ) as reply:
        for event in events_as_they_come(reply.iter_lines()):
            seen.append(event)
            if event["event"] == "metric" and states_at_first is None:
                states_at_first = server.call("status", task_id=task_id)["answer"]["state"]
            if event["event"] == "result":
                break
    assert states_at_first == "running"  # seen while the task ran, not replayed after
    metric = [e for e in seen if e["event"] == "metric"]
    assert len(metric) >= 3  # in batches as the worker flushed them, not one at the end
    assert steps_of(seen) == list(range(30))
    assert all(e["data"]["run_id"] == handle["run_id"] and e["data"]["task_id"] == task_id
               for e in metric)
    assert all(e["data"]["kind"] == "metric" for e in metric)
    # resumed after the second metric event: the rest, no point twice, none missing
    middle = metric[1]
    resumed = stream(server, task_id, last_id=middle["id"])
    before = steps_of(seen[: seen.index(middle) + 1])
    assert before + steps_of(resumed) == list(range(30))
    assert resumed[-1]["event"] == "result"
    # an id of the usual form (no metrics offset) replays the points from the start
    assert steps_of(stream(server, task_id, last_id=middle["id"].split(".")[0])) == list(
        range(30))


def test_metric_events_are_opt_in(server: ServerProcess) -> None:
    """An AxonX 0.2.2 client refuses an event kind it does not know: a stream that did not
    ask for metric events gets none, and its ids are plain numbers."""
    handle = submit(server, "tracked_steps", steps=5)
    wait_end(server, handle["task_id"])
    plain = stream(server, handle["task_id"], query="")
    assert {e["event"] for e in plain} <= {"progress", "log", "result"}
    assert all(e["id"].isdigit() for e in plain)
    for query in ("?metrics=maybe", "?metrics=2"):
        with server.client() as client:
            reply = client.post(f"/jobs/stream_task/events{query}",
                                json={"arguments": {"task_id": handle["task_id"]}})
        assert reply.status_code == 422 and "metrics must be true or false" in reply.text
    for bad in ("1.x", "1.-5", "1." + "9" * 40, "1.+5", "x.5"):
        with server.client() as client:
            reply = client.post("/jobs/stream_task/events?metrics=true",
                                json={"arguments": {"task_id": handle["task_id"]}},
                                headers={"last-event-id": bad})
        assert reply.status_code == 422, (bad, reply.text)


def test_a_forged_metrics_file_is_read_safely(server: ServerProcess, tmp_path: Path) -> None:
    handle = submit(server, "tracked_steps", steps=2)
    task_id = handle["task_id"]
    wait_end(server, task_id)
    metrics = task_dir(server, task_id) / "metrics.jsonl"
    metrics.unlink()
    metrics.symlink_to("/etc/passwd")
    assert steps_of(stream(server, task_id)) == []
    metrics.unlink()
    good = json.dumps({"name": "ok", "step": 4, "value": 1.5, "time": 1.0}).encode()
    metrics.write_bytes(b"".join([
        b"root:x:0:0:root:/root:/bin/bash\n",
        b'{"name": "big", "step": 1, "value": 1, "time": 1, "p": "' + b"x" * (3 << 20) + b'"}\n',
        b"[" * 200_000 + b"\n",
        b'{"name": "nan", "step": 1, "value": NaN, "time": 1}\n',
        b'{"name": "/bad", "step": 1, "value": 1, "time": 1}\n',
        good + b"\n",
        b"\x00" * 4096,
    ]))
    events = stream(server, task_id)
    metric = [e for e in events if e["event"] == "metric"]
    points = [p for e in metric for p in e["data"]["points"]]
    # a bare NaN token is a float NaN to Python's reader: sent as the string, never bare
    assert points == [{"name": "nan", "step": 1, "value": "NaN", "time": 1.0},
                      {"name": "ok", "step": 4, "value": 1.5, "time": 1.0}]
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(good + b"\n")
    metrics.unlink()
    metrics.hardlink_to(secret)
    assert steps_of(stream(server, task_id)) == []


def test_points_are_written_when_a_run_fails_or_is_cancelled(server: ServerProcess) -> None:
    # logged outside any step, just before the failure: only the run's end writes them
    handle = submit(server, "tracked_slow", points=7, every=0.0, fail=True)
    status = wait_end(server, handle["task_id"])
    assert status["state"] == "failed" and "failed after its points" in status["error"]
    assert [p.step for p in read_points(task_dir(server, handle["task_id"]))] == list(range(7))
    assert status["metrics"]["live"] == {"last": 6.0, "min": 0.0, "max": 6.0, "step": 6,
                                         "count": 7}
    handle = submit(server, "tracked_slow", points=1000, every=0.02)
    task_id = handle["task_id"]
    deadline = time.monotonic() + 30
    while (server.call("status", task_id=task_id)["answer"].get("metrics") or {}).get(
            "live", {}).get("count", 0) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert server.call("cancel", task_id=task_id)["success"]
    status = wait_end(server, task_id)
    points = read_points(task_dir(server, task_id))
    assert status["state"] == "cancelled"
    assert 3 <= len(points) < 1000 and [p.step for p in points] == list(range(len(points)))
    assert status["metrics"]["live"]["count"] == len(points)
