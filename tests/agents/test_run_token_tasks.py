"""A run token acts only as its run: what an agent inside a real bubblewrap sandbox can do
with the Job API through its socket, against a real server."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from agent_support import needs_bwrap
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run

from serverproc import ServerProcess, start_server

pytestmark = [pytest.mark.sandbox, needs_bwrap]

TASK_SCRIPT = """
import json, os, socket
found = {"uid": os.getuid(), "env": sorted(os.environ)}
try:
    open(HOST_FILE, "w").write("escaped")
    found["write"] = "written"
except OSError as exc:
    found["write"] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
    found["connect"] = "connected"
except OSError as exc:
    found["connect"] = type(exc).__name__
found["sees"] = {p: os.path.exists(p) for p in PATHS}
found["siblings"] = sorted(os.listdir(os.path.dirname(os.getcwd())))
json.dump(found, open("probe.json", "w"))
"""


def command_for(host_file: Path, port: int, paths: list[str]) -> str:
    script = TASK_SCRIPT.replace("HOST_FILE", json.dumps(str(host_file)))
    script = script.replace("PORT", str(port)).replace("PATHS", json.dumps(paths))
    encoded = base64.b64encode(script.encode()).decode()
    return f"python3 -c \"import base64; exec(base64.b64decode('{encoded}'))\""


def job(name: str, **arguments: Any) -> list[Any]:
    return [name, "POST", f"/jobs/{name}", {"arguments": arguments}]


def run_probe(client: httpx.Client, session_id: str, calls: list[list[Any]]) -> dict[str, Any]:
    run = create_run(client, session_id, json.dumps(calls), package="scope_probe")
    done = wait_run(client, run["id"], timeout=90)
    assert done["state"] == "succeeded", done
    reply = client.get(f"/runs/{run['id']}/files/replies.json")
    assert reply.status_code == 200, reply.text
    return {"run": done, **reply.json()}


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """The main server and a forwarding target, shared: each test works in sessions and
    tasks of its own, and none forwards anything to the target."""
    root = tmp_path_factory.mktemp("servers")
    other = start_server(root / "other", token="other-secret")
    targets = {"other": {"url": other.url, "token": "other-secret"}}
    main = agent_server(root / "main", "bwrap", token="server-secret", targets=targets)
    try:
        yield main, other
    finally:
        main.stop()
        other.stop()


def admin_task(server: ServerProcess, name: str, command: str) -> str:
    handle = server.call("submit", task="command", command=command, task_name=name)["answer"]
    return str(handle["task_id"])


def test_run_token_tasks_are_sandboxed_and_scoped(
    servers: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    main, other = servers
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    host_file = tmp_path / "outside" / "escaped.txt"
    host_file.parent.mkdir()
    admin_done = admin_task(main, "admin-done", "echo admin-secret")
    main.call("stream_task", task_id=admin_done)
    admin_busy = admin_task(main, "admin-busy", "sleep 60")
    with api(main, timeout=120) as client:
        session_b = new_session(client, "b")
        b = run_probe(client, session_b, [job("submit", task="demo", x=1, y=2, task_name="b-task")])
        b_task = b["submit"]["body"]["answer"]["task_id"]
        main.call("stream_task", task_id=b_task)
        session_a = new_session(client, "a")
        paths = [str(main.workspace), str(main.log_dir), str(tmp_path / "outside")]
        own = "base#command#a-task"
        missing = "base#command#no-such-task"
        calls = [
            job("submit", task="command", task_name="a-task",
                command=command_for(host_file, port, paths)),
            job("stream_task", task_id=own),
            job("status", task_id=own),
            job("read_task_log", task_id=own),
            job("get_task_context", task_id=own),
            job("list_task_ids"),
            job("list_task_statuses"),
            ["packages", "GET", "/api/v1/packages", None],
            ["state", "GET", f"/api/v1/sessions/{session_a}/state", None],
            ["session_b", "GET", f"/api/v1/sessions/{session_b}", None],
            ["target", "POST", "/jobs/submit",
             {"arguments": {"task": "demo", "x": 1, "y": 2}, "target": "other"}],
            job("cancel", task_id=admin_busy),
            job("delete_tasks", task_ids=[admin_done, b_task]),
        ]  # fmt: skip
        for label, task_id in (("b", b_task), ("admin", admin_done), ("none", missing)):
            calls += [
                [f"{label}:{name}", *job(name, task_id=task_id)[1:]]
                for name in ("status", "read_task_log", "get_task_graph", "get_task_context")
            ]
            calls.append([f"{label}:wait", *job("wait_task", task_id=task_id, run_id="r")[1:]])
        a = run_probe(client, session_a, calls)
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()

    # the task ran in its own sandbox, as the run, and reached nothing of the host
    task_dir = main.workspace / "base" / own
    found = json.loads((task_dir / "probe.json").read_text())
    assert a["stream_task"]["body"]["answer"]["state"] == "succeeded", a["stream_task"]
    assert found["write"] != "written" and not host_file.exists()
    assert found["connect"] != "connected"
    assert found["sees"] == dict.fromkeys(paths, False)
    assert found["siblings"] == [own]
    assert "RUNYARD_TOKEN" not in found["env"] and "RUNYARD_API_TOKEN" not in found["env"]
    status = json.loads((task_dir / "status.json").read_text())
    assert status["submitted_by"] == {"session_id": session_a, "run_id": a["run"]["id"]}
    assert a["status"]["body"]["answer"]["submitted_by"] == status["submitted_by"]
    assert a["status"]["body"]["answer"]["log_path"] == ""
    assert a["read_task_log"]["body"]["success"] is True

    # its own tasks only
    assert a["list_task_ids"]["body"]["answer"] == [own]
    assert [s["task_id"] for s in a["list_task_statuses"]["body"]["answer"]] == [own]
    for label, task_id in (("b", b_task), ("admin", admin_done)):
        for name in ("status", "read_task_log", "get_task_graph", "get_task_context", "wait"):
            seen = a[f"{label}:{name}"]
            absent = a[f"none:{name}"]
            assert seen["status"] == absent["status"] == 200
            assert seen["body"] == json.loads(json.dumps(absent["body"]).replace(missing, task_id))
    assert a["cancel"]["body"]["answer"] is False
    assert main.call("status", task_id=admin_busy)["answer"]["state"] == "running"
    assert a["delete_tasks"]["body"]["answer"] == []
    assert main.call("status", task_id=admin_done)["success"]
    assert main.call("status", task_id=b_task)["success"]
    assert a["session_b"]["status"] == 404

    # no forwarding, and the target heard nothing
    assert a["target"]["status"] == 403, a["target"]
    assert other.call("list_task_ids")["answer"] == []

    # no host paths in anything it was told
    told = json.dumps(a)
    for path in (main.workspace, main.log_dir, main.root):
        assert str(path) not in told
    assert a["packages"]["status"] == 200 and a["state"]["status"] == 200
    main.call("cancel", task_id=admin_busy)


def test_admin_still_sees_run_submitted_tasks_with_their_log(
    servers: tuple[ServerProcess, ServerProcess],
) -> None:
    main, _ = servers
    with api(main, timeout=120) as client:
        session = new_session(client)
        calls = [
            job("submit", task="command", task_name="logged", command="echo from-the-sandbox"),
            job("stream_task", task_id="base#command#logged"),
        ]
        run_probe(client, session, calls)
    task_id = "base#command#logged"
    assert task_id in main.call("list_task_ids")["answer"]
    status = main.call("status", task_id=task_id)["answer"]
    assert status["log_path"].startswith(str(main.log_dir))
    log = main.call("read_task_log", task_id=task_id)["answer"]["content"]
    assert "from-the-sandbox" in log


def test_run_tokens_may_not_submit_without_a_sandbox(tmp_path: Path) -> None:
    server = agent_server(tmp_path, "none", token="server-secret")
    try:
        with api(server, timeout=120) as client:
            session = new_session(client)
            a = run_probe(client, session, [job("submit", task="demo", x=1, y=2)])
        assert a["submit"]["status"] == 403, a["submit"]
        assert "sandbox" in a["submit"]["body"]["detail"]
        assert server.call("list_task_ids")["answer"] == []
    finally:
        server.stop()


FORGE_SCRIPT = """
import json, os, signal
status = json.load(open("status.json"))
status.update(log_path=SECRET, submitted_by="admin", state="running")
json.dump(status, open("forged.tmp", "w"))
os.replace("forged.tmp", "status.json")
os.kill(os.getppid(), signal.SIGKILL)
"""


def test_a_task_that_rewrites_its_status_gains_nothing(
    servers: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    """The task folder is writable from inside: a forged log_path or submitted_by must not
    make the server read a host file for it, nor make the task an admin task."""
    main, _ = servers
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret-host-file\n" * 20)
    script = FORGE_SCRIPT.replace("SECRET", json.dumps(str(secret)))
    encoded = base64.b64encode(script.encode()).decode()
    command = f"python3 -c \"import base64; exec(base64.b64decode('{encoded}'))\""
    task_id = "base#command#forger"
    with api(main, timeout=120) as client:
        session = new_session(client)
        calls = [
            job("submit", task="command", task_name="forger", command=command),
            job("stream_task", task_id=task_id),
            job("status", task_id=task_id),
            job("read_task_log", task_id=task_id),
            job("list_task_ids"),
        ]
        a = run_probe(client, session, calls)
    assert a["stream_task"]["body"]["answer"]["state"] == "failed", a["stream_task"]
    assert "top-secret" not in json.dumps(a)
    # still its session's task (the server's record decides), and never an admin one
    assert a["status"]["body"]["answer"]["task_id"] == task_id
    admin_view = main.call("status", task_id=task_id)["answer"]
    assert "top-secret" not in json.dumps(admin_view)
    assert "top-secret" not in main.call("read_task_log", task_id=task_id)["answer"]["content"]


FORGE_RUN_SCRIPT = """
import json, os, signal
status = json.load(open("status.json"))
status.update(run_id=RUN_ID, state=STATE, log_path=SECRET, result={"forged": True})
json.dump(status, open("forged.tmp", "w"))
os.replace("forged.tmp", "status.json")
os.kill(os.getppid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    ("name", "run_id", "state"),
    [("pathid", "../../../../PWNED", "running"), ("otherid", "f" * 32, "succeeded")],
)
def test_a_task_that_forges_its_status_changes_no_record(
    servers: tuple[ServerProcess, ServerProcess], tmp_path: Path, name: str, run_id: str,
    state: str,
) -> None:
    """The task's folder inside the sandbox holds no record of the server's: a status it
    writes there (a run id that is a path, another run's id claiming success, a host file
    as its log) is never read. The run ends as its worker did (killed before its end:
    ``failed``, its own run id, no result), and deleting it removes nothing the forgery
    named."""
    main, _ = servers
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret-host-file\n")
    script = FORGE_RUN_SCRIPT.replace("SECRET", json.dumps(str(secret)))
    script = script.replace("RUN_ID", json.dumps(run_id)).replace("STATE", json.dumps(state))
    encoded = base64.b64encode(script.encode()).decode()
    command = f"python3 -c \"import base64; exec(base64.b64decode('{encoded}'))\""
    task_id = f"base#command#{name}"
    with api(main, timeout=120) as client:
        session = new_session(client)
        calls = [
            job("submit", task="command", task_name=name, command=command),
            job("stream_task", task_id=task_id),
            job("delete_tasks", task_ids=[task_id]),
        ]
        a = run_probe(client, session, calls)
    submitted = a["submit"]["body"]["answer"]["run_id"]
    ended = a["stream_task"]["body"]["answer"]
    assert ended["state"] == "failed" and ended["run_id"] == submitted, ended
    assert ended["error"].startswith("Worker ended without a final status"), ended
    assert ended["result"] == {} and "top-secret" not in json.dumps(ended)
    assert a["delete_tasks"]["body"]["answer"] == [task_id]
    assert secret.read_text() == "top-secret-host-file\n"
    assert not list(main.workspace.parent.rglob("PWNED*"))


KEEPER_SCRIPT = """
import json, os
os.makedirs("plots", exist_ok=True)
open("plots/a.txt", "w").write("made in the sandbox\\n")
os.symlink("/etc/passwd", "link")
json.dump({"task_id": "x", "run_id": "y", "state": "succeeded"}, open("status.json", "w"))
json.dump({"forged": True}, open("metadata.json", "w"))
print("records are the keeper's")
"""


def test_a_sandboxed_tasks_files_reach_its_folder_and_its_records_stay_the_keepers(
    servers: tuple[ServerProcess, ServerProcess],
) -> None:
    """Its files (a folder, a link) are moved into the task folder when it ends, as they
    are; the status and metadata it wrote beside them are left behind, and the records are
    the keeper's: the success the worker reported, with the submitted run's identity."""
    main, _ = servers
    encoded = base64.b64encode(KEEPER_SCRIPT.encode()).decode()
    command = f"python3 -c \"import base64; exec(base64.b64decode('{encoded}'))\""
    task_id = "base#command#kept"
    with api(main, timeout=120) as client:
        session = new_session(client)
        calls = [
            job("submit", task="command", task_name="kept", command=command),
            job("stream_task", task_id=task_id),
        ]
        a = run_probe(client, session, calls)
    ended = a["stream_task"]["body"]["answer"]
    assert ended["state"] == "succeeded", ended
    assert ended["run_id"] == a["submit"]["body"]["answer"]["run_id"]
    folder = main.workspace / "base" / task_id
    assert (folder / "plots" / "a.txt").read_text() == "made in the sandbox\n"
    assert (folder / "link").is_symlink() and os.readlink(folder / "link") == "/etc/passwd"
    assert not (folder / ".sandbox").exists()
    status = json.loads((folder / "status.json").read_text())
    assert status["task_id"] == task_id and status["state"] == "succeeded"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["task_id"] == task_id and "forged" not in metadata
    assert "records are the keeper's" in main.call("read_task_log", task_id=task_id)[
        "answer"]["content"]


def test_a_cancelled_sandboxed_task_ends_cancelled_with_its_files_kept(
    servers: tuple[ServerProcess, ServerProcess],
) -> None:
    """A cancel reaches the sandbox through its keeper's group; the end is ``cancelled``,
    and what the task wrote before it is in its task folder, not left in ``.sandbox``."""
    main, _ = servers
    task_id = "base#command#cancelme"
    command = "echo before > partial.txt; sleep 60"
    with api(main, timeout=120) as client:
        session = new_session(client)
        calls = [job("submit", task="command", task_name="cancelme", command=command, shell=True)]
        run = create_run(client, session, json.dumps(calls), package="scope_probe")
        wait_run(client, run["id"], timeout=90)
        folder = main.workspace / "base" / task_id
        deadline = time.monotonic() + 30
        while not (folder / ".sandbox" / "partial.txt").exists():
            assert time.monotonic() < deadline, main.call("status", task_id=task_id)["answer"]
            time.sleep(0.05)
        assert main.call("cancel", task_id=task_id)["success"]
        deadline = time.monotonic() + 30
        while main.call("status", task_id=task_id)["answer"]["state"] != "cancelled":
            assert time.monotonic() < deadline, "the task was not cancelled"
            time.sleep(0.1)
    assert (folder / "partial.txt").read_text() == "before\n"
    assert not (folder / ".sandbox").exists()


def test_run_token_over_tcp_reads_no_other_task_files(
    servers: tuple[ServerProcess, ServerProcess],
) -> None:
    """The task-file routes are on the TCP listener: a run token there sees only its own
    session's task folders; others answer exactly as missing ones."""
    main, _ = servers
    admin_done = admin_task(main, "admin-files", "echo admin-secret")
    main.call("stream_task", task_id=admin_done)
    missing = "base#command#no-such-task"
    with api(main, timeout=120) as client:
        session = new_session(client)
        calls = [
            job("submit", task="command", task_name="own-files", command="true"),
            job("stream_task", task_id="base#command#own-files"),
            ["hold", "GET", "release", None],
        ]
        run = create_run(client, session, json.dumps(calls), package="scope_probe")
        token = wait_file(client, run["id"], "token").decode()
        replies = {}
        with httpx.Client(base_url=main.url, timeout=30) as tcp:
            headers = {"authorization": f"Bearer {token}"}
            for task_id in (admin_done, missing, "base#command#own-files"):
                for suffix in ("", "/status.json"):
                    path = f"/api/v1/tasks/{quote(task_id, safe='')}/files{suffix}"
                    reply = tcp.get(path, headers=headers)
                    replies[task_id + suffix] = (reply.status_code, reply.text)
        state = main.workspace / "agent" / "session-state" / session
        (state / "release").write_text("go")
        assert wait_run(client, run["id"])["state"] == "succeeded"
    for suffix in ("", "/status.json"):
        seen, absent = replies[admin_done + suffix], replies[missing + suffix]
        assert seen[0] == absent[0] == 404, (seen, absent)
        assert seen[1] == absent[1].replace(missing, admin_done)
        assert replies["base#command#own-files" + suffix][0] == 200, replies
