"""The real AxonX 0.2.2 CLI and Python client (PyPI ``axonx==0.2.2``, Python 3.12) against a
real runyard server with auth on: every job the CLI can name, its ``detail`` argument, and
its validated event stream.

The venv is built once and kept in ``~/.cache/runyard-tests/axonx-0.2.2-cli-venv``. It holds
axonx and its declared dependencies except ``claude-agent-sdk`` (about 400 MB, used only by
AxonX's own agent runner, which these tests never start). The CLI
runs through ``axonx.cli.main.main`` in one long-lived driver process
(``axonx_driver.py``), so AxonX is imported once; one call goes through the installed
``axonx`` script itself.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from runyard.api.compat_jobs import COMPAT_JOBS
from runyard.workspace.events import append_event
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

SEED_JOBS = {
    "list_installed_task_definitions", "get_task_definition", "submit", "wait_task",
    "list_task_ids", "list_task_statuses", "status", "read_task_log", "stream_task",
    "get_task_graph", "get_task_context", "cancel", "delete_tasks",
}  # fmt: skip
# AxonX's own example, scheduling its submit job (never due while the tests run)
SCHEDULES = {
    "schedules": {
        "download_at_1600": {
            "backend": "cron", "description": "Download recent market data after the close.",
            "job": "submit", "cron": "0 16 1 1 *", "timezone": "Asia/Shanghai",
            "arguments": {"task": "demo", "x": 16, "y": 0},
        },
    }
}  # fmt: skip


if not (VENV / ".ready").exists():
    # the first test also builds the venv (pip install): give it room once, not every run
    pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("axonx-srv"), config=SCHEDULES)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def axonx(srv: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), srv, tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


def submit_demo(axonx: AxonX, **inputs: Any) -> dict[str, Any]:
    argv = ["submit", "--task", "demo"]
    for key, value in {"x": 2, "y": 3, **inputs}.items():
        argv += [f"--{key}", json.dumps(value)]
    handle = axonx.ok(*argv)["answer"]
    assert set(handle) == {"task_id", "run_id", "task"}
    return handle


def test_installed_script_help_and_catalogue(axonx: AxonX) -> None:
    """The ``axonx`` script itself, then ``help`` (with and without --job) and ``version``."""
    script = subprocess.run(
        [str(axonx.venv / "bin" / "axonx"), "help", *axonx.target],
        capture_output=True, text=True, cwd=axonx.cwd, env=axonx.env, timeout=110, check=False,
    )  # fmt: skip
    assert script.returncode == 0, script.stderr
    listed = {job["name"] for job in json.loads(script.stdout)["answer"]["jobs"]}
    assert listed == SEED_JOBS | set(COMPAT_JOBS)
    wait = axonx.ok("help", "--job", "wait_task")["answer"]["job"]
    assert wait["input_schema"]["properties"]["detail"]["enum"] == ["summary", "full"]
    unknown = axonx.cli("help", "--job", "no_such_job")
    assert unknown["rc"] == 1 and "Unknown job 'no_such_job'" in unknown["out"]
    version = axonx.ok("version")
    assert version["answer"] == version["metadata"]["version"] != ""
    diagnose = axonx.ok("diagnose")["answer"]
    assert "demo" in diagnose["tasks"] and diagnose["storage"]["low"] is False
    assert axonx.client("health") is True
    jobs = {job["name"]: job for job in axonx.client("list_jobs")}
    assert set(jobs) == SEED_JOBS | set(COMPAT_JOBS)  # GET /jobs lists the AxonX jobs too


def test_task_definitions(axonx: AxonX) -> None:
    """The CLI asks for definitions without schemas (include_schemas=false)."""
    listed = axonx.ok("list_installed_task_definitions")["answer"]
    demo = next(d for d in listed if d["name"] == "demo")
    assert "input_schema" not in demo and "output_schema" not in demo
    full = axonx.ok("list_installed_task_definitions", "--include-schemas", "true")["answer"]
    assert set(next(d for d in full if d["name"] == "demo")["input_schema"]["required"]) == {
        "x", "y",
    }  # fmt: skip
    one = axonx.ok("get_task_definition", "--task", "demo")["answer"]
    assert one["name"] == "demo" and "x" in one["input_schema"]["properties"]


def test_submit_wait_status_with_detail(axonx: AxonX) -> None:
    """wait_task and status: the CLI's default ``detail: summary``, and ``full``."""
    handle = submit_demo(axonx, task_name="axonx-detail")
    assert handle["task_id"] == "base#demo#axonx-detail"
    ids = ["--task-id", handle["task_id"], "--run-id", handle["run_id"]]
    summary = axonx.ok("wait_task", *ids)["answer"]
    assert summary["state"] == "succeeded" and summary["run_id"] == handle["run_id"]
    assert "result" not in summary and "config" not in summary and "steps" not in summary
    assert summary["step_progress"] == {
        "current": 2, "total": 2, "name": "compute", "percentage": 100.0,
    }  # fmt: skip
    assert summary["display_name"] == "axonx-detail"
    full = axonx.ok("wait_task", *ids, "--detail", "full")["answer"]
    assert full["result"]["result"] == 5 and [s["name"] for s in full["steps"]] == [
        "prepare", "compute",
    ]  # fmt: skip
    status = axonx.ok("status", "--task-id", handle["task_id"])["answer"]
    assert "result" not in status and status["step_progress"]["total"] == 2
    full_status = axonx.ok("status", "--task-id", handle["task_id"], "--detail", "full")
    assert full_status["answer"]["result"]["result"] == 5
    for job, extra in (("status", []), ("wait_task", ["--run-id", handle["run_id"]])):
        bad = axonx.cli(job, "--task-id", handle["task_id"], *extra, "--detail", "everything")
        assert bad["rc"] == 1 and "rejected" in bad["err"] and "detail" in bad["err"], bad
    # a seed client sends no detail and gets the whole status, as before
    seed = axonx.client("run_job", name="status", arguments={"task_id": handle["task_id"]})
    assert seed["answer"]["result"]["result"] == 5 and "step_progress" not in seed["answer"]


def test_stream_events_validate(axonx: AxonX) -> None:
    """stream_task through the CLI and the client: every event passes AxonX's models."""
    handle = submit_demo(axonx, x=4, y=5)
    events = axonx.stream("stream_task", "--task-id", handle["task_id"])
    kinds = [event["kind"] for event in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    assert {"progress", "log"} <= set(kinds)
    progress = [e for e in events if e["kind"] == "progress"]
    assert {e["name"] for e in progress} == {"prepare", "compute"}
    assert progress[-1]["state"] == "done" and progress[-1]["percentage"] == 100.0
    log = "".join(e["content"] for e in events if e["kind"] == "log")
    assert "Demo result=9" in log
    assert events[-1]["success"] is True and events[-1]["answer"]["result"]["result"] == 9
    typed = axonx.client("stream_job", name="stream_task", arguments={"task_id": handle["task_id"]})
    assert {e["type"] for e in typed} == {"ProgressEvent", "LogEvent", "ResultEvent"}
    # any job streams as one validated result event
    single = axonx.stream("status", "--task-id", handle["task_id"])
    assert [e["kind"] for e in single] == ["result"] and single[0]["answer"]["state"] == "succeeded"
    # a step line with fields beyond AxonX's step model (as an older writer or a plugin may
    # leave in events.jsonl) still streams: the event carries only the model's fields
    workspace = Workspace.open(axonx.srv.workspace, axonx.srv.log_dir)
    events_path = workspace.events_path(handle["task_id"])
    append_event(events_path, {"kind": "progress", "name": "extra", "note": "not axonx's"})
    again = axonx.stream("stream_task", "--task-id", handle["task_id"])
    extra = [e for e in again if e["kind"] == "progress" and e["name"] == "extra"]
    assert len(extra) == 1 and "note" not in extra[0] and extra[0]["state"] == "pending"
    assert again[-1]["kind"] == "result" and again[-1]["success"] is True
    failed = axonx.stream("stream_task", "--task-id", "base#demo#no-such-task")
    assert [e["kind"] for e in failed] == ["result"] and failed[0]["success"] is False


def test_listing_logs_lineage(axonx: AxonX) -> None:
    handle = submit_demo(axonx, x=1, y=1)
    task_id, run_id = handle["task_id"], handle["run_id"]
    axonx.ok("wait_task", "--task-id", task_id, "--run-id", run_id)
    assert task_id in axonx.ok("list_task_ids")["answer"]
    statuses = axonx.ok("list_task_statuses", "--task-type", "base")["answer"]
    assert any(s["task_id"] == task_id and s["result"]["result"] == 2 for s in statuses)
    summaries = axonx.ok("list_task_statuses", "--detail", "summary")["answer"]
    assert all("result" not in s and "config" not in s for s in summaries)
    mine = [s["display_name"] for s in summaries if s["task_id"] == task_id]
    assert mine == [task_id.rsplit("#", 1)[1]]  # the generated instance name
    log = axonx.ok("read_task_log", "--task-id", task_id, "--run-id", run_id)["answer"]
    assert "Demo result=2" in log["content"]
    stale = axonx.cli("read_task_log", "--task-id", task_id, "--run-id", "0" * 32)
    assert stale["rc"] == 1 and "is not the current run" in stale["out"], stale
    graph = axonx.ok("get_task_graph", "--task-id", task_id)["answer"]
    assert [node["task_id"] for node in graph["nodes"]] == [task_id]
    context = axonx.ok("get_task_context", "--task-id", task_id)["answer"]
    assert context["task_id"] == task_id and context["status"]["state"] == "succeeded"


def test_cancel_and_delete(axonx: AxonX) -> None:
    handle = axonx.ok("submit", "--task", "command", "--command", "sleep 60")["answer"]
    task_id = handle["task_id"]
    stale = axonx.ok("cancel", "--task-id", task_id, "--run-id", "0" * 32)
    assert stale["answer"] is False  # not this task's run: nothing cancelled
    assert axonx.ok("cancel", "--task-id", task_id, "--run-id", handle["run_id"])["answer"] is True
    done = axonx.cli("wait_task", "--task-id", task_id, "--run-id", handle["run_id"])
    assert done["rc"] == 1 and json.loads(done["out"])["answer"]["state"] == "cancelled"
    deleted = axonx.ok("delete_tasks", "--task-ids", json.dumps([task_id]))["answer"]
    assert deleted == [task_id]
    assert task_id not in axonx.ok("list_task_ids")["answer"]


def test_python_client_calls(axonx: AxonX) -> None:
    """AxonX's HttpClient.run_job for submit, wait_task (summary) and status (full)."""
    handle = axonx.client("run_job", name="submit", arguments={"task": "demo", "x": 7, "y": 1})
    assert handle["success"] is True
    ids = {"task_id": handle["answer"]["task_id"], "run_id": handle["answer"]["run_id"]}
    waited = axonx.client("run_job", name="wait_task", arguments={**ids, "detail": "summary"})
    assert waited["success"] is True and "result" not in waited["answer"]
    full = axonx.client(
        "run_job", name="status", arguments={"task_id": ids["task_id"], "detail": "full"}
    )
    assert full["answer"]["result"]["result"] == 8


def test_list_schedules(axonx: AxonX) -> None:
    """AxonX's list_schedules through its CLI: its parameters, its answer, the history."""
    srv = axonx.srv
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as client:
        record = client.post("/api/v1/schedules/download_at_1600/trigger").json()
    assert record["outcome"] == "submitted"
    srv.call("wait_task", task_id=record["task_id"], run_id=record["run_id"])
    [plain] = axonx.ok("list_schedules")["answer"]
    assert {
        "scheduler_id", "name", "job", "description", "cron", "timezone", "arguments",
        "concurrency_policy", "next_run_at", "running", "last_trigger",
    } <= set(plain)  # fmt: skip
    assert plain["job"] == "submit" and plain["arguments"]["task"] == "demo"
    assert plain["timezone"] == "Asia/Shanghai" and plain["next_run_at"].endswith("+08:00")
    assert plain["concurrency_policy"] == "forbid" and "history" not in plain
    assert "result" not in plain["last_trigger"]
    named = axonx.ok(
        "list_schedules", "--name", "download_at_1600", "--include-history", "true",
        "--history-limit", "5",
    )["answer"]  # fmt: skip
    [schedule] = named
    [run] = schedule["history"]
    assert {"name", "job", "trigger_id", "triggered_at", "scheduler_id", "state", "error",
            "finished_at", "result"} <= set(run)  # fmt: skip
    assert run["state"] == "succeeded" and run["result"]["task_id"] == record["task_id"]
    assert schedule["history_total"] == 1
    assert schedule["history_scheduler_ids"] == [schedule["scheduler_id"]]
    assert axonx.ok("list_schedules", "--name", "nothing")["answer"] == []
    bad = axonx.cli("list_schedules", "--history-limit", "0")
    assert bad["rc"] == 1 and "history_limit" in bad["err"], bad
