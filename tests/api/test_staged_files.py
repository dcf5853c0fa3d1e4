"""AxonX's ``POST /files`` and ``DELETE /files`` on a real server with auth on, tried the
way a hostile caller would: a run token, names and directories that leave ``tmp/`` or
reach runyard's own state, a symlinked parent (``tmp`` itself included), an oversized
body (declared, and one that lies by sending no length), and a disk that fills mid-upload.
Whatever is refused leaves nothing behind, in the workspace or outside it."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serverproc import ServerProcess, start_server, until

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from agent_support import PACKAGES

    config = {
        "files_max_upload_mb": 1,
        "agent_packages_dir": str(PACKAGES),  # a run, for a run token
        "agent_sandbox": "none",
    }
    srv = start_server(tmp_path_factory.mktemp("staged-files"), config=config)
    try:
        yield srv
    finally:
        srv.stop()


def upload(
    srv: ServerProcess,
    body: bytes | Iterator[bytes],
    name: str = "data.bin",
    directory: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    sent = {**(headers or srv.headers), "content-type": "application/octet-stream"}
    sent["x-file-name"] = name
    if directory is not None:
        sent["x-file-directory"] = directory
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        return client.post("/files", content=body, headers=sent)


def discard(srv: ServerProcess, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        return client.delete("/files", params={"path": path}, headers=headers or srv.headers)


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (links not followed), for before/after comparisons."""
    found = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def staged_files(srv: ServerProcess) -> set[str]:
    return {p for p in tree(srv.workspace / "tmp") if (srv.workspace / "tmp" / p).is_file()}


def test_an_upload_lands_in_a_folder_of_its_own_and_is_discarded(server: ServerProcess) -> None:
    first = upload(server, b"wheel bytes", "pkg-1.0-py3-none-any.whl")
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["success"] is True and answer["metadata"] == {}
    path = answer["answer"]["path"]
    assert re.fullmatch(r"tmp/[0-9a-f]{32}/pkg-1\.0-py3-none-any\.whl", path), path
    assert answer["answer"]["size"] == len(b"wheel bytes")
    assert (server.workspace / path).read_bytes() == b"wheel bytes"

    again = upload(server, b"other", "pkg-1.0-py3-none-any.whl", directory="tmp/peers")
    second = again.json()["answer"]["path"]
    assert second.startswith("tmp/peers/") and second != path
    assert (server.workspace / path).read_bytes() == b"wheel bytes"  # nothing overwritten

    for staged in (path, second):
        gone = discard(server, staged)
        assert gone.status_code == 200 and gone.json()["answer"] == {"path": staged}
        assert not (server.workspace / staged).parent.exists()
        assert discard(server, staged).status_code == 200  # gone already: harmless
    assert (server.workspace / "tmp").is_dir() and staged_files(server) == set()


def test_a_run_token_can_neither_upload_nor_discard(server: ServerProcess) -> None:
    from api_helpers import api, create_run, new_session, wait_file, wait_run

    kept = upload(server, b"keep me").json()["answer"]["path"]
    with api(server) as admin:
        session_id = new_session(admin)
        run = create_run(admin, session_id, "token\nwait-for go\nanswer done", package="probe")
        as_run = {"authorization": f"Bearer {wait_file(admin, run['id'], 'token').decode()}"}
        try:
            refused = upload(server, b"from a run", headers=as_run)
            assert refused.status_code == 403, refused.text
            assert "admin token" in refused.json()["detail"]
            assert discard(server, kept, headers=as_run).status_code == 403
            assert staged_files(server) == {kept.removeprefix("tmp/")}
        finally:
            (server.workspace / "agent" / "session-state" / session_id / "go").touch()
            assert wait_run(admin, run["id"])["state"] == "succeeded"
    assert discard(server, kept).status_code == 200


@pytest.mark.parametrize(
    ("name", "directory"),
    [
        ("x.bin", "../outside"),
        ("x.bin", "tmp/../agent"),
        ("x.bin", "agent"),
        ("x.bin", "agent/session-state"),
        ("x.bin", ".idempotency"),
        ("x.bin", ".history"),
        ("x.bin", "base"),
        ("x.bin", "/etc"),
        ("x.bin", "."),
        ("x.bin", "tmp/.hidden"),
        ("../server.json", None),
        ("server.json/..", None),
        ("a/b.bin", None),
        (".hidden", None),
        ("..", None),
        ("", None),
        ("x" * 201, None),
    ],
)
def test_a_name_or_directory_outside_tmp_is_refused_and_nothing_is_written(
    server: ServerProcess, name: str, directory: str | None
) -> None:
    before = tree(server.workspace)
    outside = tree(server.root)
    reply = upload(server, b"payload", name, directory)
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"], reply.text
    assert tree(server.workspace) == before
    assert tree(server.root) == outside


def test_a_directory_deeper_than_the_limit_is_refused(server: ServerProcess) -> None:
    """A peer names ``tmp`` or one folder below; thousands deep would outlive rmtree."""
    before = tree(server.workspace)
    reply = upload(server, b"deep", directory="tmp/" + "a/" * 1500)
    assert reply.status_code == 422 and "at most 16 components" in reply.json()["detail"]
    assert tree(server.workspace) == before
    deepest = upload(server, b"ok", directory="tmp/" + "a/" * 13)
    assert deepest.status_code == 200, deepest.text
    assert discard(server, deepest.json()["answer"]["path"]).status_code == 200
    assert not (server.workspace / "tmp" / "a").exists()  # the emptied folders went too
    assert discard(server, "tmp/" + "a/" * 20 + "x").status_code == 422


@pytest.mark.parametrize(
    "path", ["server.json", "tmp", "tmp/", "../runyard.yaml", "agent/x", "tmp/../server.json"]
)
def test_a_discard_outside_tmp_deletes_nothing(server: ServerProcess, path: str) -> None:
    before = tree(server.workspace)
    reply = discard(server, path)
    assert reply.status_code == 422, reply.text
    assert tree(server.workspace) == before
    assert (server.workspace / "server.json").is_file()
    assert (server.root / "runyard.yaml").is_file()


def test_a_symlinked_parent_is_not_followed(server: ServerProcess, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"precious")
    tmp = server.workspace / "tmp"
    tmp.mkdir(exist_ok=True)
    (tmp / "evil").symlink_to(outside)
    try:
        reply = upload(server, b"planted", directory="tmp/evil")
        assert reply.status_code == 422, reply.text
        assert "links are not followed" in reply.json()["detail"]
        assert discard(server, "tmp/evil/victim").status_code == 422
        assert sorted(p.name for p in outside.iterdir()) == ["victim"]
        assert (outside / "victim").read_bytes() == b"precious"
    finally:
        (tmp / "evil").unlink()

    tmp.rename(server.workspace / "tmp-real")
    tmp.symlink_to(outside)  # the staging folder itself swapped for a link
    try:
        assert upload(server, b"planted").status_code == 422
        assert discard(server, "tmp/victim").status_code == 422
        assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    finally:
        tmp.unlink()
        (server.workspace / "tmp-real").rename(tmp)


def test_an_oversized_upload_is_refused_with_nothing_kept(server: ServerProcess) -> None:
    declared = upload(server, bytes(MIB + 1))
    assert declared.status_code == 413, declared.text
    assert "files_max_upload_mb" in declared.json()["detail"]

    def no_length() -> Iterator[bytes]:  # chunked: the size is known only as it arrives
        for _ in range(5):
            yield bytes(256 << 10)

    streamed = upload(server, no_length())
    assert streamed.status_code == 413, streamed.text
    assert staged_files(server) == set()
    assert [p for p in tree(server.workspace / "tmp") if ".part" in p] == []

    exact = upload(server, bytes(MIB))  # the limit itself is allowed
    assert exact.status_code == 200, exact.text
    assert discard(server, exact.json()["answer"]["path"]).status_code == 200


def test_a_declared_length_past_the_limit_is_refused_before_the_body(
    server: ServerProcess,
) -> None:
    """10 GiB declared and never sent: the answer comes at once, not after a body timeout."""
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /files HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Type: application/octet-stream\r\n"
        f"x-file-name: big.bin\r\nContent-Length: {10 << 30}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(head.encode())
        status = conn.recv(4096).split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 413"), status
    assert staged_files(server) == set()


def test_a_body_of_another_type_is_refused_by_its_content_type(server: ServerProcess) -> None:
    for media in ("text/plain", "application/json", "application/x-tar"):
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client:
            reply = client.post("/files", content=b"{}", headers={"content-type": media})
        assert reply.status_code == 415, reply.text
        assert "application/octet-stream" in reply.json()["detail"]
    assert staged_files(server) == set()


def multipart(
    srv: ServerProcess, body: bytes | Iterator[bytes], boundary: str = "b0und"
) -> httpx.Response:
    headers = {**srv.headers, "content-type": f"multipart/form-data; boundary={boundary}"}
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        return client.post("/files", content=body, headers=headers)


def part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--b0und\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


END = b"--b0und--\r\n"


def test_a_multipart_upload_is_staged_as_axonx_takes_it(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        reply = client.post(
            "/files", data={"directory": "tmp/peers"}, files={"file": ("w.whl", b"wheel")}
        )
    assert reply.status_code == 200, reply.text
    path = reply.json()["answer"]["path"]
    assert (
        re.fullmatch(r"tmp/peers/[0-9a-f]{32}/w\.whl", path) and reply.json()["answer"]["size"] == 5
    )
    assert (server.workspace / path).read_bytes() == b"wheel"
    named = multipart(server, part("file", b"x" * 70_000, "a.bin") + END)
    assert named.json()["answer"]["path"].endswith("/a.bin")  # spans several chunks
    assert (server.workspace / named.json()["answer"]["path"]).stat().st_size == 70_000
    for staged in (path, named.json()["answer"]["path"]):
        assert discard(server, staged).status_code == 200


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (part("other", b"x") + part("file", b"data", "a.bin") + END, "Only 'file' and 'directory'"),
        (part("file", b"one", "a.bin") + part("file", b"two", "b.bin") + END, "Duplicate"),
        (part("file", b"data", "a.bin") + part("directory", b"tmp/x") + END, "must come before"),
        (part("directory", b"tmp/x") + END, "requires one file field"),
        (part("file", b"data", "a.bin"), "Incomplete multipart body"),
        (part("directory", b"agent") + part("file", b"data", "a.bin") + END, "confined to"),
        (part("directory", b"tmp/../agent") + part("file", b"d", "a.bin") + END, "'..'"),
        (part("file", b"data", "../server.json") + END, "Invalid upload filename"),
        (part("directory", b"x" * (65 << 10)) + part("file", b"d", "a.bin") + END, "field is longer than 65536"),
        (b"--b0und\r\nno headers here\r\n\r\n", "Malformed multipart body"),
    ],
    ids=["other field", "two files", "directory after", "no file", "unfinished", "agent",
         "dot-dot", "file name", "long field", "malformed"],
)  # fmt: skip
def test_a_refused_multipart_upload_keeps_nothing(
    server: ServerProcess, body: bytes, reason: str
) -> None:
    before = tree(server.workspace)
    reply = multipart(server, body)
    assert reply.status_code == 422, reply.text
    assert reason in reply.json()["detail"], reply.text
    assert tree(server.workspace) == before


def test_an_oversized_multipart_upload_is_413_with_nothing_kept(server: ServerProcess) -> None:
    before = tree(server.workspace)
    reply = multipart(server, part("file", bytes(MIB + 1), "big.bin") + END)
    assert reply.status_code == 413, reply.text

    # a small file, then megabytes after the closing boundary, which a parser skips
    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield part("file", b"small", "a.bin") + END
        for _ in range(8):
            yield bytes(256 << 10)

    padded = multipart(server, chunked())
    assert padded.status_code == 413, padded.text
    assert tree(server.workspace) == before


def test_a_dropped_connection_leaves_nothing(server: ServerProcess) -> None:
    """Half of a declared 512 KiB body, then the connection closes."""
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /files HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Type: application/octet-stream\r\n"
        f"x-file-name: cut.bin\r\nx-file-directory: tmp/cut\r\nContent-Length: {512 << 10}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(head.encode() + bytes(256 << 10))
        until(lambda: (server.workspace / "tmp" / "cut").exists(), timeout=20)  # under way
    until(lambda: not (server.workspace / "tmp" / "cut").exists(), timeout=20)
    assert staged_files(server) == set()


def test_a_discard_of_a_folder_or_a_link_removes_nothing_behind_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    held = server.workspace / "tmp" / "held"
    held.mkdir(parents=True)
    (held / "inside").write_bytes(b"kept")
    (server.workspace / "tmp" / "link").symlink_to(held)
    try:
        for path in ("tmp/held", "tmp/link"):
            reply = discard(server, path)
            assert reply.status_code == 422, reply.text
        assert (held / "inside").read_bytes() == b"kept"
        assert (server.workspace / "tmp" / "link").is_symlink()
    finally:
        (server.workspace / "tmp" / "link").unlink()
        (held / "inside").unlink()
        held.rmdir()


def test_a_disk_full_mid_upload_answers_507_and_leaves_nothing(tmp_path: Path) -> None:
    flag = tmp_path / "disk-full"
    flag.touch()
    env = {"RUNYARD_FAULT_ENOSPC": f"files.write:{flag}"}
    srv = start_server(tmp_path / "srv", env=env)
    try:
        before = tree(srv.workspace)
        full = upload(srv, bytes(3 * MIB), "archive.tar.gz", directory="tmp/a/b")
        assert full.status_code == 507, full.text
        assert tree(srv.workspace) == before  # not even the folders it made
        flag.unlink()
        freed = upload(srv, bytes(3 * MIB), "archive.tar.gz")
        assert freed.status_code == 200, freed.text
        assert (srv.workspace / freed.json()["answer"]["path"]).stat().st_size == 3 * MIB
    finally:
        srv.stop()


def test_an_upload_a_crash_cut_short_is_swept_at_the_next_start(tmp_path: Path) -> None:
    """Its temp file is older than the server; a newer one (an upload being received) and
    a staged file stay, and a link is not followed out of tmp/."""
    workspace = tmp_path / "srv" / "ws"
    crashed = workspace / "tmp" / ("a" * 32)
    crashed.mkdir(parents=True)
    (crashed / ".archive.tar.gz.0123abcd.part").write_bytes(b"half")
    os.utime(crashed / ".archive.tar.gz.0123abcd.part", (1, 1))
    receiving = workspace / "tmp" / ("b" * 32)
    receiving.mkdir()
    (receiving / ".wheel.whl.4567ef01.part").write_bytes(b"arriving")
    future = 4_000_000_000
    os.utime(receiving / ".wheel.whl.4567ef01.part", (future, future))
    staged = workspace / "tmp" / ("c" * 32) / "kept.whl"
    staged.parent.mkdir()
    staged.write_bytes(b"staged")
    os.utime(staged, (1, 1))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".evil.part").write_bytes(b"not ours")
    os.utime(outside / ".evil.part", (1, 1))
    (workspace / "tmp" / "link").symlink_to(outside)

    srv = start_server(tmp_path / "srv")
    try:
        until(lambda: not crashed.exists(), timeout=30)
        assert (receiving / ".wheel.whl.4567ef01.part").read_bytes() == b"arriving"
        assert staged.read_bytes() == b"staged"
        assert (outside / ".evil.part").read_bytes() == b"not ours"
        logged = (srv.log_dir / "server.log").read_text()
        assert f"removed 1 unfinished uploads to POST /files: tmp/{'a' * 32}/." in logged
    finally:
        srv.stop()
