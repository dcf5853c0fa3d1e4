"""The whole story on a real server with the reference package: three runs of one session
with a server restart in between, sandboxed and plain. Each run sees the earlier answers
in its history, the same /workspace/state, its inputs, and reaches the Task Job API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_support import MODES
from api_helpers import agent_server, api, create_run, new_session, upload, wait_run


def answers(client, session_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    history = client.get(f"/sessions/{session_id}").json()["history"]
    return [turn["runId"] for turn in history if turn["role"] == "assistant"]


@pytest.mark.parametrize("mode", MODES)
def test_three_runs_and_a_restart(tmp_path: Path, mode: str) -> None:
    server = agent_server(tmp_path, mode)
    try:
        with api(server) as client:
            session_id = new_session(client, "continuity")
            upload(client, session_id, b"day,price\n1,10\n2,11\n", "prices.csv", "data/prices.csv")
            first = wait_run(client, create_run(client, session_id, "summarise the data")["id"])
            second_id = create_run(client, session_id, "and now?")["id"]
            second = wait_run(client, second_id)
            # a run being watched by an old server finishes under a new one
            waiting = create_run(client, session_id, "wait-for go\nanswer adopted", package="probe")
    finally:
        server.stop(keep_runs=True)
    assert first["state"] == "succeeded", first
    assert second["state"] == "succeeded", second
    assert first["isolation"] == second["isolation"] == mode
    server = agent_server(tmp_path, mode)
    try:
        with api(server) as client:
            state_dir = server.workspace / "agent" / "session-state" / session_id
            assert client.get(f"/runs/{waiting['id']}").json()["state"] == "running"
            (state_dir / "go").touch()
            assert wait_run(client, waiting["id"])["state"] == "succeeded"
            third = wait_run(client, create_run(client, session_id, "one more time")["id"])
            assert third["state"] == "succeeded", third
            _check_third(client, session_id, [first["id"], second["id"], waiting["id"]], third)
            _check_demo(client, third["id"], mode)
    finally:
        server.stop()


def _check_third(client, session_id: str, earlier: list[str], third: dict) -> None:  # type: ignore[no-untyped-def]
    assert answers(client, session_id) == [*earlier, third["id"]]
    report = json.loads(client.get(f"/runs/{third['id']}/files/report.json").content)
    assert report["checkpoint"]["runCount"] == 3  # reference runs 1, 2 and 3 shared state/
    assert report["checkpoint"]["journalRows"] == 3
    assert report["inputs"] == [
        {"path": "in/data/prices.csv", "size": 20, "lines": 3, "sha256Matches": True}
    ]
    answer = client.get(f"/runs/{third['id']}/files/final-answer.md").text
    assert "I saw 6 earlier turns in the history" in answer
    assert "The previous answer began: adopted" in answer
    session = client.get(f"/sessions/{session_id}").json()
    assert session["latestRunId"] == third["id"]
    assert session["history"][-1]["content"] == answer


def _check_demo(client, run_id: str, mode: str) -> None:  # type: ignore[no-untyped-def]
    """Sandboxed runs reach the Job API; a plain run's token may not submit at all."""
    demo = json.loads(client.get(f"/runs/{run_id}/files/report.json").content)["demo"]
    if mode == "none":
        assert demo["state"] == "refused" and "sandbox" in demo["reason"], demo
    else:
        assert demo["state"] == "succeeded" and demo["result"] == 4, demo
