"""AxonX 0.2.2's agent session jobs against a real runyard server with auth on: the real
AxonX CLI and client call each, every answer validates with AxonX's own models (run in
its venv), a session answers to its UUID and to its runyard id, a session with an active
run is not deleted, and a run token reaches its own session only.

``agent_chat`` runs the built-in offline reference agent; the runs held open for a test
run ``scope_probe`` (tests/agents/packages), which writes its token and waits for a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)

SESSION_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "runyard:agent-session")
# validates stdin's JSON with one of AxonX's models, inside AxonX's own venv
VALIDATE = """
import json, sys
from pydantic import TypeAdapter
from axonx.components.agent.contracts import AgentMutationResult, AgentSession, AgentSessionInfo
model = {"list": list[AgentSessionInfo], "session": AgentSession,
         "mutation": AgentMutationResult}[sys.argv[1]]
TypeAdapter(model).validate_python(json.load(sys.stdin))
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = agent_server(tmp_path_factory.mktemp("axonx-agents"), "none", cancel_grace_seconds=1.0)
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


def valid(kind: str, answer: Any) -> Any:
    """``answer``, after AxonX's model for ``kind`` accepted it."""
    python = str(VENV / "bin" / "python")
    reply = subprocess.run(
        [python, "-c", VALIDATE, kind], input=json.dumps(answer), capture_output=True, text=True
    )
    assert reply.returncode == 0, reply.stderr
    return answer


def as_uuid(session_id: str) -> str:
    return str(uuid.uuid5(SESSION_NAMESPACE, session_id))


def job(srv: ServerProcess, name: str, token: str | None = None, **arguments: Any) -> Any:
    headers = {"authorization": f"Bearer {token or srv.token}"}
    with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as client:
        return client.post(f"/jobs/{name}", json={"arguments": arguments})


def held_run(srv: ServerProcess, session_id: str) -> tuple[str, str]:
    """A run of the session that waits for ``state/release``: its id and its token."""
    with api(srv) as client:
        calls = [["hold", "GET", "release", None]]
        run = create_run(client, session_id, json.dumps(calls), package="scope_probe")
        return run["id"], wait_file(client, run["id"], "token").decode()


def release(srv: ServerProcess, session_id: str, run_id: str) -> None:
    (srv.workspace / "agent" / "session-state" / session_id / "release").touch()
    with api(srv) as client:
        wait_run(client, run_id)


def test_chat_then_list_get_rename_tag_by_both_ids(srv: ServerProcess, axonx: AxonX) -> None:
    chat = axonx.ok("agent_chat", "--message", "summarise the demo")
    assert chat["metadata"]["state"] == "succeeded" and isinstance(chat["answer"], str)
    shown = chat["metadata"]["session_id"]  # a new session: answered by its UUID
    with api(srv) as client:
        ident = client.get(f"/runs/{chat['metadata']['run_id']}").json()["sessionId"]
    assert shown == as_uuid(ident) and uuid.UUID(shown).version == 5

    listed = valid("list", axonx.ok("list_agent_sessions")["answer"])
    assert [s["session_id"] for s in listed].count(shown) == 1
    info = next(s for s in listed if s["session_id"] == shown)
    assert info["first_prompt"] == "summarise the demo" and info["backend"] == "runyard"

    by_uuid = valid("session", axonx.ok("get_agent_session", "--session-id", shown)["answer"])
    assert by_uuid["info"]["session_id"] == shown
    assert [b["role"] for b in by_uuid["blocks"]] == ["user", "assistant"]
    assert by_uuid["blocks"][1]["text"] == chat["answer"]
    by_id = valid("session", axonx.ok("get_agent_session", "--session-id", ident)["answer"])
    assert by_id["info"]["session_id"] == ident and by_id["blocks"] == by_uuid["blocks"]
    paged = axonx.ok("get_agent_session", "--session-id", ident, "--offset", "1", "--limit", "1")
    assert [b["role"] for b in paged["answer"]["blocks"]] == ["assistant"]

    renamed = axonx.ok("rename_agent_session", "--session-id", shown, "--title", "Q3 report")
    assert valid("mutation", renamed["answer"]) == {"session_id": shown}
    tagged = axonx.ok("tag_agent_session", "--session-id", ident, "--tag", "finance")
    assert valid("mutation", tagged["answer"]) == {"session_id": ident}
    info = axonx.ok("get_agent_session", "--session-id", shown)["answer"]["info"]
    assert (info["custom_title"], info["summary"], info["tag"]) == (
        "Q3 report",
        "Q3 report",
        "finance",
    )
    with api(srv) as client:
        session = client.get(f"/sessions/{ident}").json()
    assert (session["title"], session["tag"]) == ("Q3 report", "finance")
    axonx.ok("tag_agent_session", "--session-id", shown, "--tag", "null")  # null clears
    assert axonx.ok("get_agent_session", "--session-id", shown)["answer"]["info"]["tag"] is None

    # the chat goes on in the same session, named either way
    again = axonx.ok("agent_chat", "--message", "and again", "--session-id", ident)
    assert again["metadata"]["session_id"] == ident
    blocks = axonx.ok("get_agent_session", "--session-id", shown)["answer"]["blocks"]
    assert len(blocks) == 4


def test_chat_streams_axonx_events(srv: ServerProcess, axonx: AxonX) -> None:
    events = axonx.stream("agent_chat", "--message", "stream it")
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "result" and set(kinds[:-1]) == {"agent_message"}
    result = events[-1]
    assert result["success"] is True and result["metadata"]["state"] == "succeeded"
    messages = events[:-1]
    assert messages[0]["type_name"] == "SessionStart"
    assert [m["sequence"] for m in messages] == list(range(len(messages)))
    assert {m["session_id"] for m in messages} == {result["metadata"]["session_id"]}
    assert messages[1]["role"] == "user" and messages[1]["presentation"][0]["delta"] == "stream it"
    assert messages[-1]["role"] == "assistant"
    assert messages[-1]["presentation"][0]["delta"] == result["answer"]
    states = [m["presentation"][0]["delta"] for m in messages if m["type_name"] == "SystemMessage"]
    assert states[-1].endswith(" is succeeded")
    # a turn that cannot start is one failed result, as AxonX streams a failed job
    failed = axonx.stream("agent_chat", "--message", "x", "--session-id", str(uuid.uuid4()))
    assert [e["kind"] for e in failed] == ["result"] and failed[0]["success"] is False
    assert "No agent session" in failed[0]["answer"]
    # the client's typed stream: the same events, as AxonX's models
    typed = axonx.client("stream_job", name="agent_chat", arguments={"message": "typed"})
    assert typed[-1]["type"] == "ResultEvent" and typed[-1]["success"] is True
    assert {e["type"] for e in typed[:-1]} == {"AgentMessageEvent"}


def test_fork_at_the_newest_checkpoint_and_at_a_message(srv: ServerProcess, axonx: AxonX) -> None:
    chat = axonx.ok("agent_chat", "--message", "first")
    shown = chat["metadata"]["session_id"]
    axonx.ok("agent_chat", "--message", "second", "--session-id", shown)
    blocks = axonx.ok("get_agent_session", "--session-id", shown)["answer"]["blocks"]

    fork = axonx.ok("fork_agent_session", "--session-id", shown, "--title", "branch")
    forked = valid("mutation", fork["answer"])["session_id"]
    assert forked != shown and uuid.UUID(forked).version == 5
    copied = axonx.ok("get_agent_session", "--session-id", forked)["answer"]
    assert copied["info"]["custom_title"] == "branch"
    assert [b["text"] for b in copied["blocks"]] == [b["text"] for b in blocks]

    first_answer = blocks[1]["message_uuid"]
    early = axonx.ok(
        "fork_agent_session", "--session-id", shown, "--up-to-message-id", first_answer
    )["answer"]["session_id"]
    texts = [
        b["text"] for b in axonx.ok("get_agent_session", "--session-id", early)["answer"]["blocks"]
    ]
    assert texts == [blocks[0]["text"], blocks[1]["text"]]

    unknown = axonx.cli(
        "fork_agent_session", "--session-id", shown, "--up-to-message-id", str(uuid.uuid4())
    )
    assert unknown["rc"] == 1 and "No message" in json.loads(unknown["out"])["answer"]


def test_delete_refused_while_a_turn_runs_then_cancel_and_delete(
    srv: ServerProcess, axonx: AxonX
) -> None:
    with api(srv) as client:
        ident = new_session(client, "doomed")
        client.post("/artifacts/upload", data={"sessionId": ident},
                    files={"file": ("a.csv", b"x,y\n", "text/csv")}).raise_for_status()  # fmt: skip
    run_id, _ = held_run(srv, ident)
    agent = srv.workspace / "agent"
    refused = axonx.cli("delete_agent_session", "--session-id", as_uuid(ident))
    answer = json.loads(refused["out"])
    assert refused["rc"] == 1 and "RunActive" in answer["answer"], answer
    assert (agent / "workspaces" / run_id).is_dir()
    assert axonx.ok("get_agent_session", "--session-id", ident)["answer"]["blocks"]

    cancelled = axonx.ok("cancel_agent_turn", "--session-id", as_uuid(ident))
    assert valid("mutation", cancelled["answer"]) == {"session_id": as_uuid(ident)}
    with api(srv) as client:
        assert client.get(f"/runs/{run_id}").json()["state"] == "cancelled"
        uploads = list((agent / "uploads").iterdir())
        assert uploads
    idle = axonx.cli("cancel_agent_turn", "--session-id", ident)
    assert idle["rc"] == 1 and "running turn" in json.loads(idle["out"])["answer"]

    deleted = axonx.ok("delete_agent_session", "--session-id", ident)
    assert valid("mutation", deleted["answer"]) == {"session_id": ident}
    gone = axonx.cli("get_agent_session", "--session-id", as_uuid(ident))
    assert gone["rc"] == 1 and "No agent session" in json.loads(gone["out"])["answer"]
    with api(srv) as client:
        assert client.get(f"/sessions/{ident}").status_code == 404
        assert client.get(f"/runs/{run_id}").status_code == 404
    assert not (agent / "workspaces" / run_id).exists()
    assert not (agent / "session-state" / ident).exists()
    assert not (srv.workspace.parent / "logs" / "agent" / f"{run_id}.log").exists()
    assert not [p for p in (agent / "uploads").iterdir() if p in uploads]


def test_a_run_token_reaches_its_own_session_only(srv: ServerProcess) -> None:
    """The attacker holds session A's run token and names session B by both its ids."""
    with api(srv) as client:
        mine, other = new_session(client, "mine"), new_session(client, "other")
    run_id, token = held_run(srv, mine)
    try:
        listed = job(srv, "list_agent_sessions", token).json()
        assert [s["session_id"] for s in listed["answer"]] == [as_uuid(mine)]
        own = job(srv, "get_agent_session", token, session_id=as_uuid(mine)).json()
        assert own["success"] is True
        for ref in (other, as_uuid(other)):
            for name, extra in (
                ("get_agent_session", {}),
                ("rename_agent_session", {"title": "taken"}),
                ("tag_agent_session", {"tag": "taken"}),
                ("delete_agent_session", {}),
                ("cancel_agent_turn", {}),
                ("agent_chat", {"message": "hi"}),
            ):
                extra = {"message": "hi"} if name == "agent_chat" else extra
                reply = job(srv, name, token, session_id=ref, **extra).json()
                assert reply["success"] is False and "No " in reply["answer"], (name, reply)
                assert other not in reply["answer"] or ref == other  # no id learnt by UUID
        for name, arguments in (
            ("fork_agent_session", {"session_id": mine}),
            ("agent_chat", {"message": "a new session"}),
        ):
            assert job(srv, name, token, **arguments).status_code == 403, name
        with api(srv) as client:
            seen = client.get(f"/sessions/{other}").json()
        assert (seen["title"], seen["tag"]) == ("other", None)
        renamed = job(srv, "rename_agent_session", token, session_id=mine, title="own").json()
        assert renamed == {"answer": {"session_id": mine}, "success": True, "metadata": {}}
    finally:
        release(srv, mine, run_id)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("list_agent_sessions", {"limit": 0}),
        ("list_agent_sessions", {"limit": 201}),
        ("list_agent_sessions", {"offset": -1}),
        ("list_agent_sessions", {"detail": "full"}),
        ("get_agent_session", {}),
        ("get_agent_session", {"session_id": "../../etc"}),
        ("get_agent_session", {"session_id": "ses-1", "limit": 1001}),
        ("rename_agent_session", {"session_id": "ses-1", "title": ""}),
        ("tag_agent_session", {"session_id": "ses-1"}),
        ("fork_agent_session", {"session_id": "ses-1", "up_to_message_id": "not-a-uuid"}),
        ("agent_chat", {"message": ""}),
        ("agent_chat", {"message": "hi", "agent_depth": -1}),
        ("agent_chat", {"message": "hi", "session_id": "a/b"}),
    ],
)
def test_bad_arguments_are_422(srv: ServerProcess, name: str, arguments: dict[str, Any]) -> None:
    reply = job(srv, name, **arguments)
    assert reply.status_code == 422, reply.text


def test_chat_depth_limit_and_unknown_session(srv: ServerProcess) -> None:
    deep = job(srv, "agent_chat", message="hi", agent_depth=3).json()
    assert deep["success"] is False and "limited to 3" in deep["answer"]
    missing = job(srv, "agent_chat", message="hi", session_id=str(uuid.uuid4())).json()
    assert missing["success"] is False and "No agent session" in missing["answer"]
    with api(srv) as client:
        ident = new_session(client, "labels")
    for bad in ("\x07bell", "x" * 201, "line\nbreak"):
        for name, field in (("tag_agent_session", "tag"), ("rename_agent_session", "title")):
            reply = job(srv, name, session_id=ident, **{field: bad}).json()
            assert reply["success"] is False and "AgentInvalid" in reply["answer"], reply
    with api(srv) as client:
        seen = client.get(f"/sessions/{ident}").json()
    assert (seen["title"], seen["tag"]) == ("labels", None)
