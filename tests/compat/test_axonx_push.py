"""An AxonX 0.2.2 peer pushes into runyard: AxonX's own sync sender
(``LocalSyncComponent.flush``, run in the AxonX venv with a runyard server with auth on as
its configured target) asks ``task_sync_index``, archives the finished task AxonX's
storage wrote as a display replica, uploads it through ``POST /files``, applies it with
``sync_tasks`` and discards the upload with ``DELETE /files``. runyard then lists and
reads the task through the AxonX CLI (status, log, the artifact), a second flush finds
it held and sends nothing, and nothing is left in the staging area."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from axonx_models import validates
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess, start_server

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("axonx-push"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def axonx(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), server, tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


def test_axonx_sync_sender_pushes_a_finished_task_runyard_then_holds(
    server: ServerProcess, axonx: AxonX, tmp_path: Path
) -> None:
    peer = {"workspace": str(tmp_path / "peer"), "log_dir": str(tmp_path / "peer-logs")}
    task_id, run_id = f"base#demo#push-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    axonx.peer("make_task", task_id=task_id, run_id=run_id, x=2, log="made by AxonX\n", **peer)
    target = {"target": server.url, "token": server.token}

    report = axonx.peer("sync_push", **peer, **target)
    assert report == {
        "uploaded": [f"base/{task_id}"], "rejected": [], "oversized": [], "deferred": [],
        "archives": 1,
    }  # fmt: skip

    status = axonx.ok("status", "--task-id", task_id, "--detail", "full")["answer"]
    assert status["state"] == "succeeded" and status["run_id"] == run_id
    assert status["result"]["y"] == 3 and status["config"] == {"x": 2}
    assert [step["name"] for step in status["steps"]] == ["compute"]
    log = axonx.ok("read_task_log", "--task-id", task_id, "--run-id", run_id)["answer"]
    assert log["content"] == "made by AxonX\n"
    assert task_id in axonx.ok("list_task_ids")["answer"]
    with server.client() as client:
        artifact = client.get(f"/api/v1/tasks/{quote(task_id, safe='')}/files/out/result.json")
    assert artifact.status_code == 200 and json.loads(artifact.content) == {"y": 3}

    index = axonx.ok("task_sync_index", "--task_names", json.dumps([task_id.rsplit("#")[-1]]))
    entry = index["answer"]["tasks"][task_id]
    assert entry["run_id"] == run_id
    validates(
        "axonx.task.schemas.replica.DisplayReplica",
        {k: v for k, v in entry.items() if k != "run_id"},
    )

    again = axonx.peer("sync_push", **peer, **target)
    assert again["uploaded"] == [] and again["archives"] == 0, again
    staged = server.workspace / "tmp"
    assert not staged.exists() or [p for p in staged.rglob("*") if p.is_file()] == []
