"""Every run kept, over HTTP: a fixed-name rerun leaves run 1's result, artifacts, metrics,
params and log readable by its run id; forged paths and unknown runs learn nothing."""

from __future__ import annotations

import hashlib
import random
from urllib.parse import quote

import pytest

from serverproc import ServerProcess, start_server

# a metric line: through $RUNYARD_METRICS_FILE where the worker reads one, else the file
METRIC = (
    'if [ -n "$RUNYARD_METRICS_FILE" ]; then '
    """echo '{{"name": "loss", "step": {step}, "value": {value}}}' >> "$RUNYARD_METRICS_FILE"; """
    "else "
    """echo '{{"name": "loss", "step": {step}, "value": {value}, "time": 1.0}}' >> metrics.jsonl; """
    "fi"
)


@pytest.fixture
def server(tmp_path) -> ServerProcess:
    srv = start_server(tmp_path / "srv", token="history-secret")
    try:
        yield srv
    finally:
        srv.stop()


def run_once(server: ServerProcess, blob: str, word: str, value: float) -> dict:
    command = (
        f"mkdir -p out && cp {blob} out/model.bin && echo {word} > note.txt && "
        f"echo said {word} && " + METRIC.format(step=1, value=value)
    )
    handle = server.call(
        "submit", task="command", task_name="sweep", command=command, shell=True,
        timeout_seconds=100 * value,
    )["answer"]  # fmt: skip
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"],
                        poll_interval=0.05)  # fmt: skip
    assert final["success"] is True, final
    return final["answer"]


def test_a_rerun_keeps_the_first_run_readable_by_its_run_id(server, tmp_path):
    blob = tmp_path / "model.bin"
    blob.write_bytes(random.Random(43).randbytes(3 * 1024 * 1024 + 17))
    first = run_once(server, str(blob), "first", 0.5)
    second = run_once(server, str(blob), "second", 0.25)
    assert first["task_id"] == second["task_id"] and first["run_id"] != second["run_id"]
    task = quote(first["task_id"], safe="")
    run1 = f"/api/v1/tasks/{task}/runs/{first['run_id']}"
    with server.client() as client:
        listed = client.get(f"/api/v1/tasks/{task}/runs").json()["runs"]
        assert [r["run_id"] for r in listed] == [second["run_id"], first["run_id"]]
        assert listed[1]["params"]["timeout_seconds"] == 50
        assert listed[0]["params"]["timeout_seconds"] == 25
        assert listed[1]["metrics"]["loss"]["last"] == 0.5

        one = client.get(run1).json()
        assert one["current"] is False and one["state"] == "succeeded"
        assert one["result"] == first["result"] and one["params"]["timeout_seconds"] == 50
        assert one["metrics"]["loss"] == {"last": 0.5, "min": 0.5, "max": 0.5, "step": 1,
                                          "count": 1}  # fmt: skip
        files = {f["path"]: f for f in one["files"]}
        want = hashlib.sha256(blob.read_bytes()).hexdigest()
        assert files["out/model.bin"]["sha256"] == want
        assert files["out/model.bin"]["size"] == blob.stat().st_size

        model = client.get(f"{run1}/files/out/model.bin")
        assert model.status_code == 200 and model.content == blob.read_bytes()
        assert model.headers["content-disposition"].startswith("attachment")
        assert model.headers["x-content-type-options"] == "nosniff"
        assert client.get(f"{run1}/files/note.txt").text == "first\n"
        ranged = client.get(f"{run1}/files/out/model.bin", headers={"range": "bytes=0-9"})
        assert ranged.status_code == 206 and ranged.content == blob.read_bytes()[:10]
        now = client.get(f"/api/v1/tasks/{task}/runs/{second['run_id']}").json()
        assert now["current"] is True
        assert client.get(f"/api/v1/tasks/{task}/files/note.txt").text == "second\n"

        log = server.call("read_task_log", task_id=first["task_id"], run_id=first["run_id"])
        assert log["success"] is True and "said first" in log["answer"]["content"]
        unknown = server.call("read_task_log", task_id=first["task_id"], run_id="0" * 32)
        assert unknown["success"] is False and "is not the current run" in unknown["answer"]

        for bad in ("../../../etc/passwd", "%2e%2e/%2e%2e/server.json", ".worker.lock",
                    "/etc/passwd", "..%2f..%2fserver.json"):  # fmt: skip
            reply = client.get(f"{run1}/files/{bad}")
            assert reply.status_code in (400, 404), (bad, reply.status_code)
            assert "root:" not in reply.text and "history-secret" not in reply.text
        missing = client.get(f"/api/v1/tasks/{task}/runs/{'0' * 32}")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"
        assert client.get(f"/api/v1/tasks/{task}/runs/..%2f..").status_code in (400, 404)
        assert client.get(f"{run1}/files/absent.txt").status_code == 404
