"""A task a run token submits runs in a bubblewrap sandbox: its metrics file lines are still
recorded, its summary reaches the status through the record keeper, its files join the task
folder at its end."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_run  # noqa: E402

from runyard.tracking.reading import read_points  # noqa: E402
from runyard.workspace.layout import Workspace  # noqa: E402

pytestmark = [pytest.mark.sandbox, needs_bwrap]

SCRIPT = (
    'echo \'{"name": "loss", "value": 0.5}\' >> "$RUNYARD_METRICS_FILE"; '
    "echo 'not a point' >> \"$RUNYARD_METRICS_FILE\"; "
    "sleep 0.7; "
    'echo \'{"name": "loss", "value": "-Infinity", "step": 9}\' >> "$RUNYARD_METRICS_FILE"'
)


def job(name: str, **arguments: Any) -> list[Any]:
    return [name, "POST", f"/jobs/{name}", {"arguments": arguments}]


def test_a_sandboxed_task_records_its_metrics(tmp_path: Path) -> None:
    server = agent_server(tmp_path / "srv", "bwrap", token="server-secret")
    try:
        task_id = "base#command#sandboxed-metrics"
        with api(server, timeout=120) as client:
            session = new_session(client, "metrics")
            calls = [
                job("submit", task="command", task_name="sandboxed-metrics", command=SCRIPT,
                    shell=True),
                job("stream_task", task_id=task_id),
            ]
            run = create_run(client, session, json.dumps(calls), package="scope_probe")
            assert wait_run(client, run["id"], timeout=90)["state"] == "succeeded"
        status = server.call("status", task_id=task_id)["answer"]
        assert status["state"] == "succeeded", status
        assert status["metrics"] == {
            "loss": {"last": "-Infinity", "min": "-Infinity", "max": 0.5, "step": 9, "count": 2}
        }
        folder = Workspace.open(server.workspace, server.log_dir).task_dir(task_id)
        assert [(p.step, p.value) for p in read_points(folder)] == [(0, 0.5), (9, -float("inf"))]
        assert not (folder / ".sandbox").exists()
        log = server.call("read_task_log", task_id=task_id)["answer"]["content"]
        assert "metrics: line 2 refused: not JSON" in log
    finally:
        server.stop()
