"""The seed's unpaged list_task_statuses {} and list_task_ids {}: streamed from the index's
answer bytes, the same answer as the model path gives, in the Job API envelope."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from runyard.workspace.layout import Workspace
from serverproc import start_server


def record(task_id: str, state: str, second: int, **extra: Any) -> dict[str, Any]:
    task_type, task, name = task_id.split("#")
    return {
        "task_id": task_id, "run_id": f"{second:032x}", "task_type": task_type,
        "task_name": task, "state": state, "config": {"task_name": name},
        "created_at": f"2026-03-01T10:00:{second:02d}.000000Z", "started_at": None,
        "finished_at": None, "pid": None, "exit_code": 0, "error": "", "result": {},
        "steps": [], "log_path": "", **extra,
    }  # fmt: skip


def seed(workspace: Path) -> list[dict[str, Any]]:
    ws = Workspace.open(workspace, workspace.parent / "logs")
    ws.ensure()
    records = [
        record("etl#load#one", "succeeded", 1, result={"text": "héllo 世界 ✓ 🙂", "n": 2.5}),
        record("train#fit#two", "failed", 2, exit_code=1, error='échec "quoted" \\ \n\t\u0001'),
        record("etl#load#three", "running", 3, pid=None),  # its worker is gone: settled
        record("base#demo#four", "cancelled", 4, custom_field={"kept": ["é", None]}),
    ]
    sparse = record("base#demo#five", "succeeded", 5)
    del sparse["steps"], sparse["result"]  # defaults filled in, as the model path does
    records.append(sparse)
    for data in records:
        folder = ws.task_dir(data["task_id"])
        folder.mkdir(parents=True)
        # written pretty and escaped, unlike the server's own records: the answer is not
        # the file's bytes but the status as answers carry it
        (folder / "status.json").write_text(json.dumps(data, indent=2))
    return records


def wait_listed(server: Any, task_id: str) -> None:
    deadline = time.monotonic() + 10
    while task_id not in server.call("list_task_ids")["answer"]:
        assert time.monotonic() < deadline, f"{task_id} never reached the index"
        time.sleep(0.05)


def test_unpaged_lists_stream_the_model_paths_answer_in_the_job_envelope(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    records = seed(root / "ws")
    server = start_server(root)
    try:
        with server.client() as client:
            # running when the server started is settled at start; this one only when listed
            late = record("etl#load#late", "running", 6)
            records.append(late)
            (root / "ws" / "etl" / late["task_id"]).mkdir()
            (root / "ws" / "etl" / late["task_id"] / "status.json").write_text(json.dumps(late))
            wait_listed(server, late["task_id"])
            reply = client.post("/jobs/list_task_statuses", json={"arguments": {}})
            assert reply.status_code == 200
            assert reply.headers["content-type"] == "application/json"
            assert "content-length" not in reply.headers  # streamed
            assert reply.content.startswith(b'{"answer":[')
            streamed = reply.json()
            assert list(streamed) == ["answer", "success", "metadata"]
            assert streamed["success"] is True and streamed["metadata"] == {}

            paged = server.call("list_task_statuses", limit=1000)  # the model path
            assert paged["metadata"] == {"next_cursor": None}
            assert streamed["answer"] == paged["answer"]
            by_id = {item["task_id"]: item for item in streamed["answer"]}
            assert [item["task_id"] for item in streamed["answer"]] == [
                r["task_id"] for r in reversed(records)
            ]
            assert by_id["etl#load#one"]["result"]["text"] == "héllo 世界 ✓ 🙂"
            assert by_id["train#fit#two"]["error"] == 'échec "quoted" \\ \n\t\u0001'
            assert by_id["etl#load#three"]["state"] == "failed"  # settled at start
            assert by_id["etl#load#late"]["state"] == "failed"  # settled by the list itself
            assert by_id["base#demo#four"]["custom_field"] == {"kept": ["é", None]}
            assert by_id["base#demo#five"]["steps"] == [] and by_id["base#demo#five"]["result"] == {}
            assert "submitted_by" not in by_id["base#demo#five"]  # absent optionals stay absent

            ids = client.post("/jobs/list_task_ids", json={"arguments": {}})
            assert ids.status_code == 200 and ids.content.startswith(b'{"answer":[')
            assert ids.json() == {"answer": list(by_id), "success": True, "metadata": {}}

            filtered = server.call("list_task_statuses", state="succeeded", task_type="base")
            assert [i["task_id"] for i in filtered["answer"]] == ["base#demo#five"]
            assert filtered == {"answer": filtered["answer"], "success": True, "metadata": {}}
            unknown = server.call("list_task_statuses", task_type="nope")  # the model's error
            assert unknown["success"] is False and "nope" in unknown["answer"]
            summary = client.post("/jobs/list_task_statuses",
                                  json={"arguments": {"detail": "summary"}})  # fmt: skip
            assert "content-length" not in summary.headers  # streamed too
            items = summary.json()["answer"]
            assert "config" not in items[0] and "step_progress" in items[0]
            paged_summary = server.call("list_task_statuses", limit=1000, detail="summary")
            assert items == paged_summary["answer"]  # the model path's answer, item for item
            assert [i["task_id"] for i in items] == list(by_id)
    finally:
        server.stop()
