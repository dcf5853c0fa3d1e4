"""Every job of the Task Job API against a real server with real workers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.api.compat_jobs import COMPAT_JOBS
from serverproc import ServerProcess, start_server

JOB_NAMES = {
    "list_installed_task_definitions", "get_task_definition", "submit", "wait_task",
    "list_task_ids", "list_task_statuses", "status", "read_task_log", "stream_task",
    "get_task_graph", "get_task_context", "cancel", "delete_tasks",
}  # fmt: skip


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("jobs"))
    try:
        yield proc
    finally:
        proc.stop()


def run_demo(srv: ServerProcess, name: str, **extra: object) -> dict:
    handle = srv.call("submit", task="demo", task_name=name, x=1, y=2, **extra)
    assert handle["success"], handle
    return srv.call(
        "wait_task",
        task_id=handle["answer"]["task_id"],
        run_id=handle["answer"]["run_id"],
        poll_interval=0.05,
    )


def test_health_and_catalogue(srv: ServerProcess) -> None:
    with srv.client() as client:
        health = client.get("/health").json()
        assert set(health["answer"]["storage"]) == {"free_mb", "min_free_mb", "low", "unwritten"}
        del health["answer"]["storage"]  # added to the seed shape, nothing removed
        assert health == {
            "answer": {"running": True},
            "success": True,
            "metadata": {},
        }
        body = client.get("/jobs").json()
    assert body["success"] is True
    names = [item["name"] for item in body["answer"]["items"]]
    assert body["answer"]["total"] == len(names) == 13 + len(COMPAT_JOBS)
    assert set(names[:13]) == JOB_NAMES  # the seed's first, then the AxonX jobs
    assert set(names[13:]) == set(COMPAT_JOBS)
    wait = next(item for item in body["answer"]["items"] if item["name"] == "wait_task")
    assert set(wait["input_schema"]["required"]) == {"task_id", "run_id"}
    assert wait["input_schema"]["properties"]["poll_interval"]["default"] == 1
    assert wait["input_schema"]["properties"]["poll_interval"]["exclusiveMinimum"] == 0


def test_definitions(srv: ServerProcess) -> None:
    listed = srv.call("list_installed_task_definitions")
    assert listed["success"] is True
    names = [d["name"] for d in listed["answer"]]
    assert names == sorted(names) and {"demo", "command"} <= set(names)
    demo = srv.call("get_task_definition", task="demo")["answer"]
    assert demo["name"] == "demo" and demo["source"] == "native" and demo["plugin"] is None
    assert demo["task_type"] == "base"
    assert demo["description"].startswith("Demonstrate synchronous Task execution")
    assert set(demo["input_schema"]["required"]) == {"x", "y"}
    missing = srv.call("get_task_definition", task="missing")
    assert missing["success"] is False
    assert missing["answer"].startswith("ValueError: Unknown Task: missing. Available: ")
    assert "demo" in missing["answer"]


def test_submit_wait_status_log(srv: ServerProcess) -> None:
    handle = srv.call("submit", task="demo", task_name="api-demo", x=1, y=2)
    assert handle["success"] is True
    answer = handle["answer"]
    assert answer["task_id"] == "base#demo#api-demo" and answer["task"] == "demo"
    assert len(answer["run_id"]) >= 16
    final = srv.call("wait_task", task_id=answer["task_id"], run_id=answer["run_id"])
    assert final["success"] is True
    status = final["answer"]
    assert status["state"] == "succeeded" and status["exit_code"] == 0
    assert status["task_name"] == "demo" and status["task_type"] == "base"
    assert status["config"] == {
        "task_name": "api-demo",
        "source_tasks": "",
        "x": 1,
        "y": 2,
        "fail": False,
    }
    assert status["result"]["result"] == 3
    assert status["created_at"].endswith("Z") and status["finished_at"].endswith("Z")
    assert srv.call("status", task_id="base#demo#api-demo")["answer"] == status
    log = srv.call("read_task_log", task_id="base#demo#api-demo", offset=0)["answer"]
    assert "Demo result=3" in log["content"]
    assert log["start_offset"] == 0 and log["next_offset"] == log["file_size"]
    assert log["has_more_before"] is False and log["has_more_after"] is False
    assert log["reset"] is False
    assert set(log) == {
        "content",
        "start_offset",
        "next_offset",
        "file_size",
        "has_more_before",
        "has_more_after",
        "reset",
    }
    past = srv.call("read_task_log", task_id="base#demo#api-demo", offset=10**9)["answer"]
    assert past["reset"] is True and "Demo result=3" in past["content"]
    assert "base#demo#api-demo" in srv.call("list_task_ids")["answer"]


def test_failed_task_answers_status_with_success_false(srv: ServerProcess) -> None:
    final = run_demo(srv, "fails", fail=True)
    assert final["success"] is False
    assert final["answer"]["state"] == "failed"
    assert final["answer"]["exit_code"] != 0
    assert "fail" in final["answer"]["error"]
    streamed = srv.call("stream_task", task_id="base#demo#fails", poll_interval=0.05)
    assert streamed["success"] is False and streamed["answer"]["state"] == "failed"


def test_wait_with_an_old_run_id_fails(srv: ServerProcess) -> None:
    first = srv.call("submit", task="demo", task_name="rerun", x=1, y=2)["answer"]
    srv.call("wait_task", task_id=first["task_id"], run_id=first["run_id"], poll_interval=0.05)
    second = srv.call("submit", task="demo", task_name="rerun", x=2, y=2)["answer"]
    assert second["run_id"] != first["run_id"]
    stale = srv.call("wait_task", task_id=first["task_id"], run_id=first["run_id"])
    assert stale["success"] is False and stale["answer"].startswith("ValueError: ")
    final = srv.call(
        "wait_task", task_id=second["task_id"], run_id=second["run_id"], poll_interval=0.05
    )
    assert final["answer"]["result"]["result"] == 4


def test_submit_failures(srv: ServerProcess) -> None:
    unknown = srv.call("submit", task="missing", x=1)
    assert unknown["success"] is False and unknown["answer"].startswith(
        "ValueError: Unknown Task: missing"
    )
    extra = srv.call("submit", task="demo", x=1, y=2, z=3)
    assert extra["success"] is False and "z" in extra["answer"]
    wrong = srv.call("submit", task="demo", x="one", y=2)
    assert wrong["success"] is False and "x" in wrong["answer"]
    bad_source = srv.call("submit", task="demo", x=1, y=2, source_tasks="not-an-id")
    assert bad_source["success"] is False and "source_tasks" in bad_source["answer"]
    bad_name = srv.call("submit", task="demo", x=1, y=2, task_name="../etc")
    assert bad_name["success"] is False
    assert not any(p.name.startswith("base#demo#..") for p in (srv.workspace / "base").iterdir())


def test_active_fixed_name_is_refused(srv: ServerProcess) -> None:
    handle = srv.call("submit", task="command", task_name="busy", command="sleep 30")["answer"]
    again = srv.call("submit", task="command", task_name="busy", command="true")
    assert again["success"] is False and again["answer"].startswith("FileExistsError: ")
    assert srv.call("cancel", task_id=handle["task_id"]) == {
        "answer": True,
        "success": True,
        "metadata": {},
    }
    final = srv.call(
        "wait_task", task_id=handle["task_id"], run_id=handle["run_id"], poll_interval=0.05
    )
    assert final["success"] is False
    assert final["answer"]["state"] == "cancelled" and final["answer"]["exit_code"] == 130
    assert srv.call("cancel", task_id=handle["task_id"]) == {
        "answer": False,
        "success": True,
        "metadata": {},
    }


def test_status_of_unknown_and_invalid_ids(srv: ServerProcess) -> None:
    unknown = srv.call("status", task_id="base#demo#nothing-here")
    assert unknown["success"] is False and unknown["answer"].startswith("KeyError: ")
    for bad in ("base/demo/x", "base#demo#..", "../../etc#x#y", "base#demo#a/b", ""):
        answer = srv.call("status", task_id=bad)
        assert answer["success"] is False, bad
        assert answer["answer"].startswith(("ValueError: ", "KeyError: ")), answer


def test_graph_and_context(srv: ServerProcess) -> None:
    run_demo(srv, "up")
    final = run_demo(srv, "down", source_tasks="base#demo#up,base#demo#gone")
    assert final["success"] is True
    graph = srv.call("get_task_graph", task_id="base#demo#down")["answer"]
    assert graph["selected_id"] == "base#demo#down"
    nodes = {node["task_id"]: node for node in graph["nodes"]}
    assert set(nodes) == {"base#demo#up", "base#demo#down", "base#demo#gone"}
    assert nodes["base#demo#gone"]["missing"] is True
    assert nodes["base#demo#down"]["parent_ids"] == ["base#demo#up", "base#demo#gone"] or set(
        nodes["base#demo#down"]["parent_ids"]
    ) == {"base#demo#up", "base#demo#gone"}
    assert {"from": "base#demo#up", "to": "base#demo#down"} in graph["edges"]
    context = srv.call("get_task_context", task_id="base#demo#up")["answer"]
    assert context["metadata_exists"] is True
    assert context["metadata_path"] == "base/base#demo#up/metadata.json"
    assert context["relations"]["direct_downstream"] == ["base#demo#down"]
    assert context["relations"]["missing"] == ["base#demo#gone"]
    assert context["status"]["state"] == "succeeded"


def test_list_statuses_order_and_paging(srv: ServerProcess) -> None:
    for index in range(3):
        run_demo(srv, f"page-{index}")
    everything = srv.call("list_task_statuses")["answer"]
    keys = [(s["created_at"], s["task_id"]) for s in everything]
    assert keys == sorted(keys, reverse=True)
    first = srv.call("list_task_statuses", limit=2)
    assert len(first["answer"]) == 2 and first["metadata"]["next_cursor"]
    second = srv.call("list_task_statuses", limit=2, cursor=first["metadata"]["next_cursor"])
    assert [s["task_id"] for s in first["answer"] + second["answer"]] == [
        s["task_id"] for s in everything[:4]
    ]
    failed = srv.call("list_task_statuses", state="failed")["answer"]
    assert all(s["state"] == "failed" for s in failed)


def test_delete_tasks(srv: ServerProcess) -> None:
    run_demo(srv, "to-delete")
    handle = srv.call("submit", task="command", task_name="still-running", command="sleep 30")[
        "answer"
    ]
    answer = srv.call(
        "delete_tasks",
        task_ids=["base#demo#to-delete", handle["task_id"], "base#demo#never", "bad id"],
    )
    assert answer == {"answer": ["base#demo#to-delete"], "success": True, "metadata": {}}
    assert not (srv.workspace / "base" / "base#demo#to-delete").exists()
    assert (srv.workspace / "base" / handle["task_id"]).exists()
    assert srv.call("delete_tasks", task_ids=["base#demo#to-delete"])["answer"] == []
    srv.call("cancel", task_id=handle["task_id"])


def test_stream_task_waits_for_the_end(srv: ServerProcess) -> None:
    handle = srv.call("submit", task="command", task_name="streamed", command="sleep 0.3")["answer"]
    started = time.monotonic()
    streamed = srv.call("stream_task", task_id=handle["task_id"], poll_interval=0.05)
    assert time.monotonic() - started >= 0.2
    assert streamed["success"] is True and streamed["answer"]["state"] == "succeeded"


def test_bad_request_bodies(srv: ServerProcess, tmp_path: Path) -> None:
    with srv.client() as client:
        malformed = client.post(
            "/jobs/status", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 422
        assert client.post("/jobs/nope", json={"arguments": {}}).status_code == 404
        wrong_type = client.post(
            "/jobs/status", content=b"<x/>", headers={"content-type": "application/xml"}
        )
        assert wrong_type.status_code == 415 and "JSON" in wrong_type.json()["detail"]
        huge = client.post(
            "/jobs/submit", json={"arguments": {"task": "demo", "blob": "x" * (2 << 20)}}
        )
        assert huge.status_code == 413
        form_style = client.post(
            "/jobs/list_task_ids",
            content=b'{"arguments":{}}',
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert form_style.status_code == 415  # what a browser would send cross-origin
    names_before = sorted(p.name for p in (srv.workspace / "base").iterdir())
    assert not any("blob" in name for name in names_before)


@pytest.mark.parametrize(
    ("job", "body"),
    [
        ("status", {"arguments": {"task_id": "base#demo#x"}, "extra": 1}),
        ("wait_task", {"arguments": {"task_id": "base#demo#x"}}),
        ("wait_task", {"arguments": {"task_id": "base#demo#x", "run_id": "r", "poll_interval": 0}}),
        ("wait_task", {"arguments": {"task_id": "", "run_id": "r"}}),
        ("wait_task", {"arguments": {"task_id": "a", "run_id": "r", "extra": True}}),
        ("read_task_log", {"arguments": {"task_id": "base#demo#x", "limit": 1023}}),
        ("read_task_log", {"arguments": {"task_id": "base#demo#x", "limit": 262145}}),
        ("read_task_log", {"arguments": {"task_id": "base#demo#x", "offset": -2}}),
        ("stream_task", {"arguments": {"task_id": "base#demo#x", "poll_interval": -1}}),
        ("delete_tasks", {"arguments": {"task_ids": []}}),
        ("delete_tasks", {"arguments": {"task_ids": ["a", "a"]}}),
        ("get_task_definition", {"arguments": {"task": ""}}),
        ("submit", {"arguments": {"task": ""}}),
        ("submit", {"arguments": {"task": "demo", "x": 1, "y": 2, "target": "elsewhere"}}),
        ("get_task_graph", {"arguments": {}}),
        ("status", {"arguments": "not an object"}),
        ("status", ["not", "an", "envelope"]),
        ("status", {"arguments": {"task_id": "base#demo#x"}, "target": "nowhere"}),
    ],
)
def test_schema_failures_are_422(srv: ServerProcess, job: str, body: object) -> None:
    before = sorted(p.name for p in (srv.workspace / "base").iterdir())
    with srv.client() as client:
        reply = client.post(f"/jobs/{job}", json=body)
    assert reply.status_code == 422, reply.text
    assert "detail" in reply.json()
    assert sorted(p.name for p in (srv.workspace / "base").iterdir()) == before


def test_openapi(srv: ServerProcess) -> None:
    with srv.client() as client:
        spec = client.get("/openapi.json").json()
    assert "/jobs/submit" in spec["paths"] and "/jobs/stream_task/events" in spec["paths"]
    ref = spec["paths"]["/jobs/wait_task"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]["$ref"]
    assert ref.rsplit("/", 1)[1] in spec["components"]["schemas"]


def test_server_finds_a_dead_worker_it_did_not_start(srv: ServerProcess) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    argv = [sys.executable, "-m", "runyard", "run", "command", "command=sleep 60", "--name", "orphan",
            "--detach", "--json", "--workspace-dir", str(srv.workspace), "--log-dir", str(srv.log_dir)]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=srv.root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    task_id = json.loads(done.stdout)["task_id"]
    deadline = time.monotonic() + 20
    while (status := srv.call("status", task_id=task_id)["answer"])["state"] != "running":
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    os.killpg(status["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while True:
        listed = {s["task_id"]: s for s in srv.call("list_task_statuses")["answer"]}
        if listed[task_id]["state"] == "failed":
            break
        assert time.monotonic() < deadline, listed[task_id]
        time.sleep(0.05)
    assert listed[task_id]["error"], listed[task_id]
    assert srv.call("status", task_id=task_id)["answer"]["state"] == "failed"


def test_list_statuses_text_filter(srv: ServerProcess) -> None:
    run_demo(srv, "needle-one")
    run_demo(srv, "other-two")
    found = srv.call("list_task_statuses", text="NEEDLE", limit=10)
    assert [s["task_id"] for s in found["answer"]] == ["base#demo#needle-one"]
    assert found["metadata"] == {"next_cursor": None}
    with srv.client() as client:
        reply = client.post("/jobs/list_task_statuses", json={"arguments": {"text": ""}})
    assert reply.status_code == 422
