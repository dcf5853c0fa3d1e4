"""Session checkpoints on a real server with real runs: a snapshot of the state folder after
every run, its index and files, forking a session from an earlier run, restoring in place,
the size limit, planted symlinks, a server killed mid-snapshot, and run tokens."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_support import MODES, PACKAGES
from api_helpers import agent_server, api, create_run, error_of, new_session, upload, wait_run
from typer.testing import CliRunner

from runyard.agents.models import HistoryEntry, Run, Session, SessionStatus
from runyard.agents.snapshots import FAULT_PAUSE_ENV
from runyard.agents.store import MemoryStore, SQLiteStore
from runyard.agents.store.schema import MIGRATIONS
from runyard.cli.main import app
from runyard.wire import TaskState
from serverproc import ServerProcess, start_server

PACKAGE = "state_counter"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def counted(client: httpx.Client, session_id: str, prompt: str = "count") -> dict[str, Any]:
    """One run of the counter package, waited for; its answer decoded."""
    run = wait_run(client, create_run(client, session_id, prompt, package=PACKAGE)["id"])
    assert run["state"] == "succeeded", run
    answer = client.get(f"/runs/{run['id']}/files/final-answer.md")
    return {**run, "answer": json.loads(answer.text)}


def three_runs(client: httpx.Client) -> tuple[str, list[dict[str, Any]]]:
    session_id = new_session(client, "counter")
    runs = [counted(client, session_id) for _ in range(3)]
    assert [run["answer"]["count"] for run in runs] == [1, 2, 3]
    return session_id, runs


def snapshots_of(server: ServerProcess, session_id: str) -> Path:
    return server.workspace / "agent" / "snapshots" / session_id


Servers = Callable[[str], ServerProcess]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One server of the default settings per sandbox mode, started when first asked for:
    the tests using it each work in sessions of their own, so they share it."""
    started: dict[str, ServerProcess] = {}

    def server_for(mode: str) -> ServerProcess:
        if mode not in started:
            started[mode] = agent_server(tmp_path_factory.mktemp(f"shared-{mode}"), mode)
        return started[mode]

    yield server_for
    for server in started.values():
        server.stop()


@pytest.mark.parametrize("mode", MODES)
def test_three_runs_index_their_checkpoints(servers: Servers, mode: str) -> None:
    server = servers(mode)
    with api(server) as client:
        session_id, runs = three_runs(client)
        index = client.get(f"/sessions/{session_id}/checkpoints").json()
        assert [item["runId"] for item in index["items"]] == [r["id"] for r in runs[::-1]]
        assert index["nextCursor"] is None
        first = runs[0]["id"]
        files = client.get(f"/sessions/{session_id}/checkpoints/{first}/files").json()
        assert files["items"] == [{"path": "checkpoints/n.txt", "size": 1, "sha256": sha("1")}]
        got = client.get(f"/sessions/{session_id}/checkpoints/{first}/files/checkpoints/n.txt")
        assert got.status_code == 200 and got.text == "1"
        record = client.get(f"/runs/{first}").json()["checkpoint"]
        assert record["state"] == "present" and record["files"] == 1 and record["bytes"] == 1
        assert "/" not in json.dumps(index).replace("checkpoints/", "")  # no host paths
        paged = client.get(f"/sessions/{session_id}/checkpoints", params={"limit": 2}).json()
        rest = client.get(
            f"/sessions/{session_id}/checkpoints", params={"cursor": paged["nextCursor"]}
        ).json()
        assert [i["runId"] for i in paged["items"] + rest["items"]] == [r["id"] for r in runs[::-1]]


@pytest.mark.parametrize("mode", MODES)
def test_fork_from_run_one_sees_one_while_the_original_goes_on(servers: Servers, mode: str) -> None:
    server = servers(mode)
    with api(server) as client:
        session_id = new_session(client, "counter")
        assert upload(client, session_id, b"a,b\n", "data.csv", "data.csv").status_code == 201
        session_id, runs = session_id, [counted(client, session_id) for _ in range(3)]
        first = runs[0]["id"]
        reply = client.post(f"/sessions/{session_id}/fork", json={"runId": first})
        assert reply.status_code == 201, reply.text
        fork = reply.json()
        assert fork["forkedFrom"] == {"sessionId": session_id, "runId": first}
        assert fork["status"] == "OPEN" and fork["id"] != session_id
        assert [(t["role"], t["runId"]) for t in fork["history"]] == [
            ("user", first), ("assistant", first)
        ]  # fmt: skip
        forked = counted(client, fork["id"])
        assert forked["answer"]["saw"] == 1
        assert forked["answer"]["turns"] == ["user", "assistant"]  # one earlier turn
        assert forked["answer"]["forkedFrom"] == {"sessionId": session_id, "runId": first}
        arts = client.get("/artifacts", params={"sessionId": fork["id"]}).json()["items"]
        assert [(a["relativePath"], a["sha256"]) for a in arts] == [
            ("data.csv", hashlib.sha256(b"a,b\n").hexdigest())
        ]
        assert client.get(f"/artifacts/{arts[0]['id']}/content").content == b"a,b\n"
        original = counted(client, session_id)
        assert original["answer"]["saw"] == 3
        assert original["answer"]["forkedFrom"] is None
        assert len(client.get(f"/sessions/{session_id}").json()["history"]) == 8


@pytest.mark.parametrize("mode", MODES)
def test_restore_to_run_two_gives_the_next_run_two(servers: Servers, mode: str) -> None:
    server = servers(mode)
    with api(server) as client:
        session_id, runs = three_runs(client)
        second = runs[1]["id"]
        reply = client.post(f"/sessions/{session_id}/restore", json={"runId": second})
        assert reply.status_code == 200, reply.text
        note = reply.json()["history"][-1]
        assert note["role"] == "system" and second in note["content"]
        after = counted(client, session_id)
        assert after["answer"]["saw"] == 2
        assert after["answer"]["turns"][-1] == "system"


def test_restore_refuses_while_a_run_is_active(servers: Servers) -> None:
    server = servers("none")
    with api(server) as client:
        session_id = new_session(client)
        first = counted(client, session_id)
        state = server.workspace / "agent" / "session-state" / session_id
        waiting = create_run(client, session_id, "wait-for go\nanswer ok", package="probe")
        reply = client.post(f"/sessions/{session_id}/restore", json={"runId": first["id"]})
        assert error_of(reply, 409)["code"] == "run_active"
        (state / "go").touch()
        assert wait_run(client, waiting["id"])["state"] == "succeeded"
        history = client.get(f"/sessions/{session_id}").json()["history"]
        assert all(turn["role"] != "system" for turn in history)


@pytest.mark.parametrize("mode", MODES)
def test_state_over_max_mb_is_skipped_with_the_reason(tmp_path: Path, mode: str) -> None:
    server = agent_server(tmp_path, mode, state_snapshots={"max_mb": 1})
    try:
        with api(server) as client:
            session_id = new_session(client)
            small = counted(client, session_id)
            large = counted(client, session_id, f"big {3 << 19}")
            assert small["checkpoint"]["state"] == "present"
            record = large["checkpoint"]
            assert record["state"] == "skipped" and "max_mb" in record["reason"], record
            index = client.get(f"/sessions/{session_id}/checkpoints").json()["items"]
            assert [item["runId"] for item in index] == [small["id"]]
            assert not (snapshots_of(server, session_id) / large["id"]).exists()
            reply = client.post(f"/sessions/{session_id}/fork", json={"runId": large["id"]})
            assert "max_mb" in error_of(reply, 404)["message"]
    finally:
        server.stop()


@pytest.mark.parametrize("mode", MODES)
def test_a_planted_symlink_is_not_followed(tmp_path: Path, servers: Servers, mode: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "inner.txt").write_text("host secret too")
    server = servers(mode)
    with api(server) as client:
        session_id = new_session(client)
        prompt = f"symlink {secret} leak\nsymlink {outside} tree"
        run = counted(client, session_id, prompt)
        record = run["checkpoint"]
        assert record["state"] == "present", record
        assert sorted(record["skipped"], key=lambda s: s["path"]) == [
            {"path": "checkpoints/leak", "kind": "symlink"},
            {"path": "checkpoints/tree", "kind": "symlink"},
        ]
        base = f"/sessions/{session_id}/checkpoints/{run['id']}/files"
        paths = [item["path"] for item in client.get(base).json()["items"]]
        assert paths == ["checkpoints/n.txt"]
        for path in ("checkpoints/leak", "checkpoints/tree/inner.txt"):
            assert client.get(f"{base}/{path}").status_code in (400, 404)
        stored = snapshots_of(server, session_id) / run["id"]
        for found in stored.rglob("*"):
            assert not found.is_symlink(), found
            assert not found.is_file() or b"host secret" not in found.read_bytes()
        # restoring brings back the files, not the links
        assert client.post(
            f"/sessions/{session_id}/restore", json={"runId": run["id"]}
        ).status_code == 200  # fmt: skip
        state = server.workspace / "agent" / "session-state" / session_id
        assert not (state / "checkpoints" / "leak").is_symlink()
        assert secret.read_text() == "host secret"


def test_kill_9_during_a_snapshot_leaves_no_half_snapshot(tmp_path: Path) -> None:
    paused = _server_with_pause(tmp_path)
    try:
        with api(paused) as client:
            session_id = new_session(client)
            run_id = create_run(client, session_id, "big 65536", package=PACKAGE)["id"]
            staging = snapshots_of(paused, session_id) / f".staging-{run_id}"
            _await(lambda: (staging / "files" / "checkpoints" / "n.txt").exists())
            paused.proc.send_signal(signal.SIGKILL)
            paused.proc.wait(10)
            assert staging.exists() and not (snapshots_of(paused, session_id) / run_id).exists()
            # a half snapshot of a run that will not be settled again is swept all the same
            orphan = snapshots_of(paused, session_id) / ".staging-run-gone"
            shutil.copytree(staging, orphan)
    finally:
        paused.stop(keep_runs=True)
    server = agent_server(tmp_path, "none")
    try:
        with api(server) as client:
            run = wait_run(client, run_id)
            assert run["state"] == "succeeded", run
            assert not staging.exists() and not orphan.exists()
            index = client.get(f"/sessions/{session_id}/checkpoints").json()["items"]
            assert [item["runId"] for item in index] == [run_id]
            base = f"/sessions/{session_id}/checkpoints/{run_id}/files"
            for item in client.get(base).json()["items"]:
                body = client.get(f"{base}/{item['path']}").content
                assert hashlib.sha256(body).hexdigest() == item["sha256"]
            assert index[0]["files"] == 2 and index[0]["bytes"] == 65537
    finally:
        server.stop()


def _server_with_pause(root: Path) -> ServerProcess:
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "none"}
    return start_server(root, config=config, env={FAULT_PAUSE_ENV: "60"})


def _await(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("mode", MODES)
def test_run_tokens_cannot_fork_or_restore_other_sessions(servers: Servers, mode: str) -> None:
    server = servers(mode)
    with api(server) as client:
        before = {session["id"] for session in client.get("/sessions").json()["items"]}
        other, runs = three_runs(client)
        target = runs[0]["id"]
        mine = new_session(client, "mine")
        mine_run = counted(client, mine)["id"]
        calls = [
            ["forkOther", "POST", f"/api/v1/sessions/{other}/fork", {"runId": target}],
            ["restoreOther", "POST", f"/api/v1/sessions/{other}/restore", {"runId": target}],
            ["listOther", "GET", f"/api/v1/sessions/{other}/checkpoints", None],
            ["filesOther", "GET", f"/api/v1/sessions/{other}/checkpoints/{target}/files",
             None],
            ["forkMine", "POST", f"/api/v1/sessions/{mine}/fork", {"runId": mine_run}],
            ["restoreMine", "POST", f"/api/v1/sessions/{mine}/restore", {"runId": mine_run}],
            ["listMine", "GET", f"/api/v1/sessions/{mine}/checkpoints", None],
        ]  # fmt: skip
        asked = create_run(client, mine, json.dumps(calls), package="scope_probe")
        probe = wait_run(client, asked["id"])
        assert probe["state"] == "succeeded", probe
        replies = json.loads(client.get(f"/runs/{probe['id']}/files/replies.json").content)
        sessions = client.get("/sessions").json()["items"]
    for name in ("forkOther", "restoreOther", "listOther", "filesOther"):
        assert replies[name]["status"] == 404, (name, replies[name])
    assert replies["forkMine"]["status"] == 403
    assert replies["restoreMine"]["status"] == 409  # its own run is active
    assert replies["listMine"]["status"] == 200
    assert str(server.workspace) not in json.dumps(replies)
    made = {session["id"] for session in sessions} - before
    assert made == {other, mine}  # no fork was made


def test_an_old_database_loads_with_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + ";PRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO sessions (id, title, status, created_at, updated_at) "
        "VALUES ('ses-1', 'old', 'OPEN', 'now', 'now')"
    )
    conn.execute(
        "INSERT INTO runs (id, session_id, state, user_prompt, created_at) "
        "VALUES ('run-1', 'ses-1', 'succeeded', 'hi', 'now')"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        session = store.get_session("ses-1")
        assert session is not None and session.forked_from is None
        run = store.get_run("run-1")
        assert run is not None and run.checkpoint is None
        # a fork copies turns with their run ids: unique per session, not across sessions
        store.append_history("ses-1", HistoryEntry("assistant", "a", "run-1", "now"))
        fork = Session("ses-2", "f", SessionStatus.OPEN, "now", "now",
                       history=[HistoryEntry("assistant", "a", "run-1", "now")],
                       forked_from={"sessionId": "ses-1", "runId": "run-1"})  # fmt: skip
        store.create_session(fork)
        loaded = store.get_session("ses-2")
        assert loaded is not None and loaded.forked_from == fork.forked_from
        assert [t.content for t in loaded.history] == ["a"]
        store.set_checkpoint("run-1", {"state": "present", "files": 0, "bytes": 0})
        listed = store.list_checkpoints("ses-1", 10).items
        assert [r.id for r in listed] == ["run-1"] and isinstance(listed[0], Run)
        assert listed[0].state == TaskState.SUCCEEDED
    finally:
        store.close()


def test_cli_checkpoints_fork_and_restore(servers: Servers) -> None:
    server = servers("none")
    env = {"RUNYARD_URL": server.url, "RUNYARD_TOKEN": server.token or ""}

    def cli(*args: str) -> Any:
        done = CliRunner().invoke(app, ["agent", *args, "--json"], env=env)
        assert done.exit_code == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    with api(server) as client:
        session_id, runs = three_runs(client)
        page = cli("checkpoints", session_id, "--limit", "2")
        assert [c["runId"] for c in page["items"]] == [runs[2]["id"], runs[1]["id"]]
        fork = cli("fork", session_id, runs[0]["id"], "--title", "branch")
        assert fork["title"] == "branch" and fork["forkedFrom"]["runId"] == runs[0]["id"]
        restored = cli("restore", session_id, runs[1]["id"])
        assert restored["history"][-1]["role"] == "system"
        assert counted(client, session_id)["answer"]["saw"] == 2
        assert counted(client, fork["id"])["answer"]["saw"] == 1
        # the reference package reads a history with a system turn in it
        reference = wait_run(client, create_run(client, session_id, "and now?")["id"])
        assert reference["state"] == "succeeded", reference
        refused = CliRunner().invoke(app, ["agent", "restore", session_id, "run-nope"], env=env)
        assert refused.exit_code != 0 and "404" in refused.stderr


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_both_stores_keep_checkpoints_and_fork_history(tmp_path: Path, kind: str) -> None:
    store = SQLiteStore(tmp_path / "state.db") if kind == "sqlite" else MemoryStore()
    try:
        store.create_session(Session("ses-a", "a", SessionStatus.OPEN, "now", "now"))
        for index in range(3):
            run = Run(f"run-{index}", "ses-a", TaskState.QUEUED, "p", "now")
            store.add_run(run, exclusive=False)
        store.set_checkpoint("run-0", {"state": "present", "files": 1, "bytes": 1})
        store.set_checkpoint("run-1", {"state": "skipped", "reason": "too large"})
        store.set_checkpoint("run-2", {"state": "present", "files": 2, "bytes": 2})
        first = store.list_checkpoints("ses-a", 1)
        assert [r.id for r in first.items] == ["run-2"] and first.next_cursor
        rest = store.list_checkpoints("ses-a", 10, first.next_cursor)
        assert [r.id for r in rest.items] == ["run-0"] and rest.next_cursor is None
        got = store.get_run("run-1")
        assert got is not None and got.checkpoint == {"state": "skipped", "reason": "too large"}
        turn = HistoryEntry("assistant", "x", "run-0", "now")
        assert store.append_history("ses-a", turn)
        fork = Session("ses-b", "b", SessionStatus.OPEN, "now", "now", history=[turn],
                       forked_from={"sessionId": "ses-a", "runId": "run-0"})  # fmt: skip
        store.create_session(fork)
        assert not store.append_history("ses-b", turn)  # still once per session
        loaded = store.get_session("ses-b")
        assert loaded is not None and loaded.history == [turn]
        assert loaded.forked_from == {"sessionId": "ses-a", "runId": "run-0"}
    finally:
        store.close()


def test_keep_last_prunes_older_snapshots(tmp_path: Path) -> None:
    server = agent_server(tmp_path, "none", state_snapshots={"keep_last": 2})
    try:
        with api(server) as client:
            session_id, runs = three_runs(client)
            index = client.get(f"/sessions/{session_id}/checkpoints").json()["items"]
            assert [item["runId"] for item in index] == [runs[2]["id"], runs[1]["id"]]
            oldest = client.get(f"/runs/{runs[0]['id']}").json()["checkpoint"]
            assert oldest["state"] == "pruned" and "keep_last" in oldest["reason"]
            assert not (snapshots_of(server, session_id) / runs[0]["id"]).exists()
            reply = client.post(f"/sessions/{session_id}/restore", json={"runId": runs[0]["id"]})
            assert "keep_last" in error_of(reply, 404)["message"]
    finally:
        server.stop()


def test_a_slow_snapshot_holds_up_no_other_session(tmp_path: Path) -> None:
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "none"}
    server = start_server(tmp_path, config=config, env={FAULT_PAUSE_ENV: "6"})
    try:
        with api(server) as client:
            slow, other = new_session(client, "slow"), new_session(client, "other")
            slow_run = create_run(client, slow, "count", package=PACKAGE)["id"]
            staging = snapshots_of(server, slow) / f".staging-{slow_run}"
            _await(lambda: staging.exists())
            started = time.monotonic()
            create_run(client, other, "count", package=PACKAGE)
            assert time.monotonic() - started < 4, "creating a run waited for another snapshot"
            assert client.get(f"/runs/{slow_run}").json()["state"] == "running"
            assert wait_run(client, slow_run)["checkpoint"]["state"] == "present"
    finally:
        server.stop()
