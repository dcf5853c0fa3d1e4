"""``/api/v1/pipelines/runs`` through a real server: a request is refused whole (422 naming
the step, not one task folder made, whichever step is at fault), a submit failing midway
leaves nothing behind, and a run token sees and cancels only its own session's runs."""

from __future__ import annotations

import copy
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serverproc import ServerProcess, start_server, until

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

RUNS = "/api/v1/pipelines/runs"
GOOD: dict[str, Any] = {
    "pipeline": "checks",
    "params": {"x": 1},
    "steps": [
        {"key": "a", "task": "demo", "inputs": {"x": {"$param": "x"}, "y": 1}, "depends_on": []},
        {"key": "b", "task": "demo", "inputs": {"x": 2, "y": 2}, "depends_on": ["a"]},
        {"key": "c", "task": "demo", "inputs": {"x": 3, "y": 3, "source_tasks": [{"$step": "b"}]}},
    ],
}


def changed(**last: Any) -> dict[str, Any]:
    """GOOD with its last step changed: the first two are valid, so a server that made
    steps one at a time before checking them all would leave two tasks behind."""
    body = copy.deepcopy(GOOD)
    body["steps"][-1].update(last)
    return body


BAD = {
    "unknown task": (changed(task="no_such_task"), "c", "Unknown Task: no_such_task"),
    "bad inputs": (changed(inputs={"x": "three", "y": 3}), "c", "Invalid input for task demo"),
    "unknown field": (changed(inputs={"x": 3, "y": 3, "z": 1}), "c", "Invalid input"),
    "unknown param": (changed(inputs={"x": {"$param": "nope"}, "y": 3}), "c", "parameter 'nope'"),
    "unknown step key": (changed(depends_on=["zz"]), "c", "'zz', which is not a step"),
    "unknown step ref": (changed(inputs={"x": 1, "y": 1, "source_tasks": {"$step": "zz"}}), "c",
                         "'zz', which is not a step"),
    "a cycle": (changed(depends_on=["c"], key="c"), "c", "depend on itself"),
    "a longer cycle": ({**GOOD, "steps": [{**GOOD["steps"][0], "depends_on": ["c"]},
                                          *GOOD["steps"][1:]]}, "a", "cycle"),
    "a fixed task name": (changed(inputs={"x": 1, "y": 1, "task_name": "victim"}), "c",
                          "may not set task_name"),
    "depends_on in inputs": (changed(inputs={"x": 1, "y": 1, "depends_on": []}), "c",
                             "may not set depends_on"),
    "a second key": (changed(key="b"), "b", "a second step has this key"),
    "a path as key": (changed(key="../x"), None, "no valid key"),
    "a hash in the key": (changed(key="c#d"), None, "no valid key"),
    "steps not a list": ({**GOOD, "steps": {"a": 1}}, None, "steps must be"),
    "too many steps": ({**GOOD, "steps": [{"key": f"s{i}", "task": "demo",
                                           "inputs": {"x": 1, "y": 1}} for i in range(201)]},
                       None, "at most 200 steps"),
    "a bad pipeline name": ({**GOOD, "pipeline": "../etc"}, None, "Invalid pipeline name"),
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("pipes") / "srv", token="pipe-secret")
    try:
        yield srv
    finally:
        srv.stop()


def task_folders(server: ServerProcess) -> set[str]:
    found = set()
    for kind in server.workspace.iterdir():
        if kind.is_dir() and not kind.name.startswith(".") and kind.name != "agent":
            found |= {p.name for p in kind.iterdir()}
    return found


def records(server: ServerProcess) -> list[str]:
    folder = server.workspace / ".pipelines"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_step_is_refused_whole_and_nothing_is_made(server: ServerProcess, case: str) -> None:
    body, step, said = BAD[case]
    before, kept = task_folders(server), records(server)
    with server.client() as client:
        reply = client.post(RUNS, json=body)
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["code"] == "invalid_pipeline"
    assert said in error["message"], error
    if step is not None:
        assert error["message"].startswith(f"Step {step}: "), error
    assert task_folders(server) == before
    assert records(server) == kept


def test_a_good_run_makes_every_step_and_its_record(server: ServerProcess) -> None:
    with server.client() as client:
        reply = client.post(RUNS, json=GOOD)
        assert reply.status_code == 200, reply.text
        run = reply.json()
        ids = {step["key"]: step["task_id"] for step in run["steps"]}
        assert f"{run['id']}.json" in records(server)
        final = until(lambda: (r := client.get(f"{RUNS}/{run['id']}").json())["state"]
                      != "running" and r, timeout=60)  # fmt: skip
    assert final["state"] == "succeeded", final
    assert [s["state"] for s in final["steps"]] == ["succeeded"] * 3
    last = server.call("status", task_id=ids["c"])["answer"]
    assert last["config"]["source_tasks"] == ids["b"]  # the reference, and the dependency
    assert set(ids.values()) <= task_folders(server)


def test_unknown_and_malformed_run_ids_answer_404(server: ServerProcess) -> None:
    with server.client() as client:
        for run_id in ("checks-20260101-000000-abcdef", "..%2F..%2Fserver", "x" * 300, "a.json"):
            reply = client.get(f"{RUNS}/{run_id}")
            assert reply.status_code == 404, reply.text
            # an encoded slash is a path of more parts: no route takes it
            assert client.post(f"{RUNS}/{run_id}/cancel").status_code in (404, 405)
    reply = httpx.post(server.url + RUNS, json=GOOD, timeout=30)  # no token
    assert reply.status_code == 401


def test_a_submit_failing_midway_removes_the_steps_made(tmp_path: Path) -> None:
    """The disk fills up as the second step is made, a second after the first was: the
    first never ran (nothing launches while a run's steps are made) and is gone."""
    flag, ran = tmp_path / "disk-full", tmp_path / "first-ran"
    flag.touch()
    body = copy.deepcopy(GOOD)
    body["steps"][0] = {"key": "a", "task": "command",
                        "inputs": {"command": f"touch {ran}", "shell": True}}  # fmt: skip
    faults = {"RUNYARD_FAULT_ENOSPC": f"pipeline.step:{flag}",
              "RUNYARD_FAULT_DELAY": "pipeline.step:1"}  # fmt: skip
    srv = start_server(tmp_path / "srv", token="pipe-secret", env=faults)
    try:
        with srv.client() as client:
            reply = client.post(RUNS, json=body)
            assert reply.status_code == 507, reply.text
            assert "nothing was created" in reply.json()["error"]["message"]
            assert task_folders(srv) == set() and records(srv) == []
            assert client.get(RUNS).json() == {"items": [], "total": 0}
            assert not ran.exists()
            flag.unlink()
            reply = client.post(RUNS, json=body)
            assert reply.status_code == 200, reply.text
            until(lambda: ran.exists())
        assert len(task_folders(srv)) == 3 and len(records(srv)) == 1
    finally:
        srv.stop()


def test_a_run_token_sees_and_cancels_only_its_sessions_runs(tmp_path: Path) -> None:
    server = agent_server(tmp_path / "srv", "auto", token="pipe-secret")
    try:
        with server.client() as admin:
            theirs = admin.post(RUNS, json=GOOD).json()
        with api(server) as client:
            session = new_session(client)
            run = create_run(client, session, "token\nwait-for go\nanswer done", package="probe")
            token = wait_file(client, run["id"], "token").decode()
            try:
                with httpx.Client(
                    base_url=server.url, timeout=60, headers={"authorization": f"Bearer {token}"}
                ) as scoped:
                    made = scoped.post(RUNS, json=GOOD)
                    assert made.status_code == 200, made.text
                    mine = made.json()
                    listed = scoped.get(RUNS).json()
                    other = scoped.get(f"{RUNS}/{theirs['id']}")
                    other_cancel = scoped.post(f"{RUNS}/{theirs['id']}/cancel")
            finally:
                (server.workspace / "agent" / "session-state" / session / "go").touch()
                wait_run(client, run["id"])
        assert [item["id"] for item in listed["items"]] == [mine["id"]]
        assert other.status_code == other_cancel.status_code == 404
        assert other.json() == {
            "error": {"code": "not_found", "message": f"No pipeline run '{theirs['id']}'"}
        }
        for step in mine["steps"]:
            who = server.call("status", task_id=step["task_id"])["answer"]["submitted_by"]
            assert who["session_id"] == session
        with server.client() as admin:
            assert {i["id"] for i in admin.get(RUNS).json()["items"]} >= {mine["id"], theirs["id"]}
    finally:
        server.stop()


def test_a_run_goes_on_across_a_kill_of_the_server(tmp_path: Path) -> None:
    gate = {
        "key": "a",
        "task": "command",
        "inputs": {"command": "while [ ! -e go ]; do sleep 0.05; done", "shell": True},
    }
    body = {**copy.deepcopy(GOOD), "steps": [gate, *copy.deepcopy(GOOD["steps"][1:])]}
    first = start_server(tmp_path / "srv", token="pipe-secret")
    try:
        with first.client() as client:
            run = client.post(RUNS, json=body).json()
        ids = {step["key"]: step["task_id"] for step in run["steps"]}
        until(lambda: first.call("status", task_id=ids["a"])["answer"]["state"] == "running")
    finally:
        first.stop(signal.SIGKILL, keep_runs=True)
    second = start_server(tmp_path / "srv", token="pipe-secret")
    try:
        with second.client() as client:
            path = f"{RUNS}/{run['id']}"
            shown = client.get(path).json()
            assert [s["state"] for s in shown["steps"]] == ["running", "queued", "queued"]
            assert shown["steps"][1]["waiting_for"] == [ids["a"]]
            (second.workspace / "base" / ids["a"] / "go").touch()
            final = until(lambda: (r := client.get(path).json())["state"] != "running" and r)
        assert final["state"] == "succeeded", final
    finally:
        second.stop()


def test_a_cancelled_run_ends_its_waiting_steps_cancelled_not_failed(tmp_path: Path) -> None:
    """A second passes after each step is cancelled: had the running upstream gone first, its
    end would have failed the waiting steps (upstream failed) before their turn."""
    gate = {
        "key": "a",
        "task": "command",
        "inputs": {"command": "while [ ! -e go ]; do sleep 0.05; done", "shell": True},
    }
    body = {**copy.deepcopy(GOOD), "steps": [gate, *copy.deepcopy(GOOD["steps"][1:])]}
    srv = start_server(tmp_path / "srv", token="pipe-secret",
                       env={"RUNYARD_FAULT_DELAY": "pipeline.cancel:1"})  # fmt: skip
    try:
        with srv.client() as client:
            run = client.post(RUNS, json=body).json()
            first = run["steps"][0]["task_id"]
            until(lambda: srv.call("status", task_id=first)["answer"]["state"] == "running")
            answer = client.post(f"{RUNS}/{run['id']}/cancel").json()
            assert len(answer["cancelled"]) == 3
            path = f"{RUNS}/{run['id']}"
            final = until(lambda: (r := client.get(path).json())["state"] != "running" and r)
        assert [s["state"] for s in final["steps"]] == ["cancelled"] * 3, final
        assert final["state"] == "cancelled"
    finally:
        srv.stop()


def test_a_keyed_create_is_made_once(server: ServerProcess) -> None:
    key = {"Idempotency-Key": "pipeline-once-1"}
    before = task_folders(server)
    with server.client() as client:
        first = client.post(RUNS, json=GOOD, headers=key)
        again = client.post(RUNS, json=GOOD, headers=key)
        other = client.post(RUNS, json={**GOOD, "params": {"x": 2}}, headers=key)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert len(task_folders(server) - before) == 3
    assert other.status_code == 409, other.text


def test_a_keyed_create_cut_short_by_a_crash_answers_its_run(tmp_path: Path) -> None:
    key = {"Idempotency-Key": "pipeline-crash-1"}
    first = start_server(tmp_path / "srv", token="pipe-secret",
                         env={"RUNYARD_FAULT_POINT": "idempotency.answer"})  # fmt: skip
    try:
        with first.client() as client, pytest.raises(httpx.TransportError):
            client.post(RUNS, json=GOOD, headers=key)  # made, then the server died
        assert len(records(first)) == 1
    finally:
        first.stop(signal.SIGKILL, keep_runs=True)
    second = start_server(tmp_path / "srv", token="pipe-secret")
    try:
        with second.client() as client:
            reply = client.post(RUNS, json=GOOD, headers=key)
        assert reply.status_code == 200, reply.text
        assert [f"{reply.json()['id']}.json"] == records(second)
        assert len(task_folders(second)) == 3
    finally:
        second.stop()
