"""A sandboxed run (real bubblewrap, real server) that writes file names which are not
UTF-8 into out/ and its session's state/: the run succeeds, its files are listed (200) by
their shown names and downloaded by them, and its state snapshot keeps and restores them
byte-exact (runyard.workspace.filenames)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from agent_support import needs_bwrap
from api_helpers import agent_server, api, create_run, new_session, wait_run

from serverproc import ServerProcess

pytestmark = [pytest.mark.sandbox, needs_bwrap]
JSON = {"content-type": "application/json"}
OUTPUTS = {  # what the bad_names package writes into out/, by shown name
    "bad\\xff.txt": b"not utf-8 name\n",
    "d\\xfe/in\\xfd.txt": b"nested\n",
}
STATE_FILE = "checkpoints/bad\\xff.bin"  # in state/, by shown name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = agent_server(tmp_path_factory.mktemp("bad-names") / "srv", "bwrap")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with api(server) as client:
        yield client


def test_a_run_writing_names_that_are_not_utf8_lists_and_serves_them(
    server: ServerProcess, client: httpx.Client
) -> None:
    session_id = new_session(client)
    run = wait_run(client, create_run(client, session_id, "go", package="bad_names")["id"])
    assert run["state"] == "succeeded", run
    reply = client.get(f"/runs/{run['id']}/files")
    assert reply.status_code == 200, reply.text
    listed = {item["path"]: item["size"] for item in reply.json()["items"]}
    assert listed == {**{k: len(v) for k, v in OUTPUTS.items()}, "final-answer.md": 46}
    for shown, content in OUTPUTS.items():
        got = client.get(f"/runs/{run['id']}/files/{quote(shown)}")
        assert got.status_code == 200 and got.content == content, got.text
    for shown in ("bad\\xFF.txt", "bad\\x5cxff.txt", "nothere\\xff"):
        refused = client.get(f"/runs/{run['id']}/files/{quote(shown)}")
        assert refused.status_code in (404, 422), refused.text
    assert "Traceback" not in "".join(server.output)


def test_the_state_snapshot_keeps_and_restores_the_names_byte_exact(
    server: ServerProcess, client: httpx.Client
) -> None:
    session_id = new_session(client)
    run = wait_run(client, create_run(client, session_id, "go", package="bad_names")["id"])
    assert run["checkpoint"]["state"] == "present", run["checkpoint"]
    base = f"/sessions/{session_id}/checkpoints/{run['id']}/files"
    files = client.get(base).json()["items"]
    assert {item["path"] for item in files} >= {STATE_FILE}
    got = client.get(f"{base}/{quote(STATE_FILE)}")
    assert got.status_code == 200 and got.content == b"state\n", got.text

    state = os.fsencode(server.workspace / "agent" / "session-state" / session_id)
    planted = os.path.join(state, b"checkpoints", b"bad\xff.bin")
    os.unlink(planted)
    reply = client.post(f"/sessions/{session_id}/restore", json={"runId": run["id"]})
    assert reply.status_code == 200, reply.text
    with open(planted, "rb") as handle:
        assert handle.read() == b"state\n"
