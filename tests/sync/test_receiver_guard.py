"""The receiving end refuses what an attacker would send: run tokens, other content types,
tar members that are links or leave the task folder — and leaves nothing behind."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

TASK_ID = "base#demo#evil"
TAR = {"content-type": "application/x-tar"}


def _status() -> bytes:
    return json.dumps(
        {
            "task_id": TASK_ID,
            "run_id": "r1",
            "task_type": "base",
            "task_name": "demo",
            "state": "succeeded",
            "created_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:01Z",
        }  # fmt: skip
    ).encode()


def _tar(*members: tarfile.TarInfo, with_status: bool = True) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if with_status:
            info = tarfile.TarInfo("task/status.json")
            body = _status()
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        for member in members:
            body = b"x" * member.size
            tar.addfile(member, io.BytesIO(body) if member.isreg() else None)
    return out.getvalue()


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 1
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = size if kind == tarfile.REGTYPE else 0
    return info


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One receiver for the tests that must leave nothing behind: each checks so after its
    own requests, so a leftover fails the test that made it."""
    srv = start_server(tmp_path_factory.mktemp("receiver") / "b")
    try:
        yield srv
    finally:
        srv.stop()


def _send(srv: ServerProcess, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    with srv.client() as client:
        return client.post(
            f"/api/v1/sync/tasks/{quote(TASK_ID, safe='')}", content=body, headers=headers or TAR
        )


def _nothing_left(srv: ServerProcess) -> bool:
    """No task folder, no staging folder, no log of the task."""
    staging = srv.workspace / ".staging"
    return (
        list((srv.workspace / "base").iterdir()) == []
        and (not staging.exists() or list(staging.iterdir()) == [])
        and not (srv.log_dir / "base" / TASK_ID).exists()
    )


BAD_MEMBERS = [
    _member("task/link", tarfile.SYMTYPE, link="/etc/passwd"),
    _member("task/hard", tarfile.LNKTYPE, link="task/status.json"),
    _member("task/../../escape.txt"),
    _member("/abs/path.txt"),
    _member("task/.worker.lock"),
    _member("task/status.json"),  # a second copy of a member
    _member("task/fifo", tarfile.FIFOTYPE),
    _member("elsewhere.txt"),
    _member("task/chr", tarfile.CHRTYPE),
    _member("task/blk", tarfile.BLKTYPE),
    _member("task/contiguous", tarfile.CONTTYPE),
    _member("log", tarfile.SYMTYPE, link="/etc/shadow"),
    _member("task/./dot.txt"),
    _member("task/" + "n" * 300),  # one name past 255 bytes
    _member("task/" + "d/" * 40 + "f"),  # 41 levels, well under 4096 bytes
    _member("task/" + "d/" * 2000 + "f"),  # 2,000 levels
]


@pytest.mark.parametrize("member", BAD_MEMBERS, ids=lambda m: m.name[:40])
def test_a_bad_tar_member_refuses_the_whole_task(
    receiver: ServerProcess, member: tarfile.TarInfo
) -> None:
    reply = _send(receiver, _tar(member))
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["code"] == "bad_member"
    assert _nothing_left(receiver)
    assert not (receiver.root / "escape.txt").exists()


def test_a_well_formed_task_is_accepted_by_the_same_route(tmp_path: Path) -> None:
    accepting = start_server(tmp_path / "b")  # not the shared one: this task is kept
    try:
        reply = _send(accepting, _tar(_member("task/ok.txt")))
        assert reply.status_code == 200, reply.text
        assert reply.json()["action"] == "applied"
        assert (accepting.workspace / "base" / TASK_ID / "ok.txt").read_bytes() == b"x"
    finally:
        accepting.stop()


def test_only_a_tar_content_type_passes_the_guard_on_the_receive_route(
    receiver: ServerProcess,
) -> None:
    body = _tar(_member("task/ok.txt"))
    for media in ("text/plain", "application/octet-stream", "multipart/form-data"):
        reply = _send(receiver, body, {"content-type": media})
        assert reply.status_code == 415, (media, reply.text)
    with receiver.client() as client:
        elsewhere = client.post("/api/v1/sync/diff", content=b"{}", headers=TAR)
        assert elsewhere.status_code == 415
        jobs = client.post("/jobs/list_task_ids", content=b"{}", headers=TAR)
        assert jobs.status_code == 415
    assert _nothing_left(receiver)


def test_a_foreign_origin_or_no_token_is_refused(receiver: ServerProcess) -> None:
    body = _tar(_member("task/ok.txt"))
    origin = {**TAR, "origin": "http://evil.example"}
    assert _send(receiver, body, origin).status_code == 403
    anon = httpx.post(
        f"{receiver.url}/api/v1/sync/tasks/{quote(TASK_ID, safe='')}", content=body, headers=TAR
    )
    assert anon.status_code == 401
    assert _nothing_left(receiver)


def test_a_run_token_may_not_use_the_sync_routes(tmp_path: Path) -> None:
    srv = agent_server(tmp_path / "srv", "none")
    try:
        with api(srv) as client:
            session_id = new_session(client)
            run = create_run(client, session_id, "token\nwait-for go\nanswer done", package="probe")
            run_token = wait_file(client, run["id"], "token").decode()
            try:
                as_run = {"authorization": f"Bearer {run_token}"}
                url = f"{srv.url}/api/v1/sync/tasks/{quote(TASK_ID, safe='')}"
                reply = httpx.post(url, content=_tar(), headers={**as_run, **TAR}, timeout=30)
                assert reply.status_code == 403, reply.text
                diff = httpx.post(
                    f"{srv.url}/api/v1/sync/diff", json={"candidates": []}, headers=as_run
                )
                assert diff.status_code == 403, diff.text
                admin = httpx.post(
                    f"{srv.url}/api/v1/sync/diff", json={"candidates": []}, headers=srv.headers
                )
                assert admin.status_code == 200
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "go").touch()
                assert wait_run(client, run["id"])["state"] == "succeeded"
        assert not (srv.workspace / "base" / TASK_ID).exists()
    finally:
        srv.stop()
