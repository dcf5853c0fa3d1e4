"""Run outputs are served from one descriptor, in a real bwrap sandbox on a real server: a run
that flips out/flip.txt between its own file and a symlink to a root-only host file never
gets that file served; hard-linked outputs and symlinked ones are refused and not listed."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from agent_support import needs_bwrap
from api_helpers import agent_server, api, create_run, new_session, upload, wait_run

from serverproc import ServerProcess

pytestmark = [pytest.mark.sandbox, needs_bwrap]
ATTEMPTS = 300
SECONDS = 60.0
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: each test reads outputs of a run of its own."""
    srv = agent_server(tmp_path_factory.mktemp("races") / "srv", "bwrap")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with api(server) as client:
        yield client


def host_secret(folder: Path, length: int) -> tuple[Path, str]:
    """A root-only 0600 file outside anything the sandbox sees, as long as the decoy."""
    text = ("SECRET-" + secrets.token_hex(length))[:length]
    path = folder / "host-secret.txt"
    path.write_text(text)
    path.chmod(0o600)
    return path, text


def test_an_output_flipped_to_a_symlink_is_never_served_through_it(
    client: httpx.Client, tmp_path: Path
) -> None:
    own = "the run's own output text"
    secret, secret_text = host_secret(tmp_path, len(own))
    session_id = new_session(client)
    prompt = f"flip out/flip.txt {secret} 90 {own}"
    run = create_run(client, session_id, prompt, package="flip_probe")
    try:
        url = f"/runs/{run['id']}/files/flip.txt"
        seen = _download_while_flipping(client, url, own, secret_text)
    finally:
        cancel = client.post(f"/runs/{run['id']}/cancel", headers=JSON)
    assert cancel.status_code == 200, cancel.text
    assert seen["own"] and seen["refused"], seen  # both sides of the flip were met
    assert wait_run(client, run["id"])["state"] == "cancelled"


def _download_while_flipping(
    client: httpx.Client, url: str, own: str, secret_text: str
) -> dict[str, int]:
    seen = {"own": 0, "refused": 0}
    deadline = time.monotonic() + SECONDS
    while client.get(url).status_code != 200:  # the run has started flipping
        assert time.monotonic() < deadline, "the run never wrote out/flip.txt"
        time.sleep(0.05)
    for _ in range(ATTEMPTS):
        if time.monotonic() > deadline:
            break
        reply = client.get(url)
        assert secret_text not in reply.text, "the symlink's target was served"
        if reply.status_code == 200:
            assert reply.text == own
            seen["own"] += 1
        else:
            assert reply.status_code == 422, reply.text
            assert "symbolic link" in reply.json()["error"]["message"]
            seen["refused"] += 1
    return seen


def test_hard_linked_and_symlinked_outputs_are_refused(
    client: httpx.Client, tmp_path: Path
) -> None:
    secret, secret_text = host_secret(tmp_path, 32)
    session_id = new_session(client)
    artifact = upload(client, session_id, b"a,b\n1,2\n", "data.csv").json()
    prompt = "\n".join([
        "write out/mine.txt mine", "hardlink out/mine.txt out/twin.txt",
        f"symlink {secret} out/link.txt", f"symlink {tmp_path} out/linkdir",
        "write out/plain.txt plain", "answer done",
    ])  # fmt: skip
    run = wait_run(client, create_run(client, session_id, prompt, package="flip_probe")["id"])
    assert run["state"] == "succeeded", run
    base = f"/runs/{run['id']}/files"
    assert client.get(f"{base}/plain.txt").text == "plain"
    for name in ("mine.txt", "twin.txt", "link.txt", "linkdir/host-secret.txt"):
        reply = client.get(f"{base}/{name}")
        assert reply.status_code == 422, (name, reply.status_code, reply.text)
        assert secret_text not in reply.text and str(tmp_path) not in reply.text
    assert "hard links" in client.get(f"{base}/twin.txt").json()["error"]["message"]
    listed = {item["path"] for item in client.get(base).json()["items"]}
    assert listed == {"plain.txt", "final-answer.md"}, listed
    # an upload is hard-linked into the run's in/ by design and still downloads
    assert client.get(f"/runs/{run['id']}").json()["artifactIds"] == [artifact["id"]]
    assert client.get(f"/artifacts/{artifact['id']}/content").content == b"a,b\n1,2\n"
    for long_name in ("x" * 256, "d" * 300 + "/f.txt"):
        reply = client.get(f"{base}/{quote(long_name)}")
        assert 400 <= reply.status_code < 500, reply.status_code
