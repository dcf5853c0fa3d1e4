"""Task files are served from one descriptor: a task that swaps a file for a symlink while
it is downloaded never gets the link's target served, and bad names are a 4xx."""

from __future__ import annotations

import secrets
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from serverproc import ServerProcess, start_server

ATTEMPTS = 300
SECONDS = 60.0
FLIPPER = """
import os, pathlib, sys, time
secret, text = sys.argv[1], sys.argv[2]
name, regular, link = pathlib.Path("flip.txt"), pathlib.Path(".r"), pathlib.Path(".l")
deadline = time.monotonic() + 90
while time.monotonic() < deadline and not pathlib.Path("stop").exists():
    regular.write_text(text)
    os.replace(regular, name)
    link.symlink_to(secret)
    os.replace(link, name)
regular.write_text(text)
os.replace(regular, name)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: each test serves files of a task of its own."""
    proc = start_server(tmp_path_factory.mktemp("races") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def root_only_secret(folder: Path, length: int) -> tuple[Path, str]:
    """A 0600 file of the server's user outside any task folder, as long as the decoy."""
    text = ("SECRET-" + secrets.token_hex(length))[:length]
    path = folder / "host-secret.txt"
    path.write_text(text)
    path.chmod(0o600)
    return path, text


def test_a_file_flipped_to_a_symlink_is_never_served_through_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    own = "the task's own file content"
    secret, secret_text = root_only_secret(tmp_path, len(own))
    command = shlex.join([sys.executable, "-c", FLIPPER, str(secret), own])
    handle = server.call("submit", task="command", task_name="flipper", command=command)["answer"]
    task_dir = server.workspace / "base" / handle["task_id"]
    url = f"/api/v1/tasks/{quote(handle['task_id'], safe='')}/files/flip.txt"
    try:
        with server.client() as client:
            seen = _download_while_flipping(client, url, own, secret_text)
    finally:
        (task_dir / "stop").write_text("")
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["success"] is True, final
    assert seen["own"] and seen["refused"], seen  # both sides of the flip were met


def _download_while_flipping(
    client: httpx.Client, url: str, own: str, secret_text: str
) -> dict[str, int]:
    seen = {"own": 0, "refused": 0}
    deadline = time.monotonic() + SECONDS
    while client.get(url).status_code != 200:  # the task has started flipping
        assert time.monotonic() < deadline, "the task never wrote flip.txt"
        time.sleep(0.02)
    for _ in range(ATTEMPTS):
        if time.monotonic() > deadline:
            break
        reply = client.get(url)
        assert secret_text not in reply.text, "the symlink's target was served"
        if reply.status_code == 200:
            assert reply.text == own
            seen["own"] += 1
        else:
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["code"] == "unsafe_path"
            seen["refused"] += 1
    return seen


def test_links_hard_links_and_long_names_are_refused(server: ServerProcess, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host.txt").write_text("host file")
    command = "echo mine > mine.txt && ln mine.txt twin.txt && echo ok > ok.txt"
    handle = server.call("submit", task="command", task_name="links", command=command, shell=True)
    task_id = handle["answer"]["task_id"]
    server.call("wait_task", task_id=task_id, run_id=handle["answer"]["run_id"])
    task_dir = server.workspace / "base" / task_id
    (task_dir / "link.txt").symlink_to(outside / "host.txt")
    (task_dir / "linkdir").symlink_to(outside)
    base = f"/api/v1/tasks/{quote(task_id, safe='')}/files"
    with server.client() as client:
        assert client.get(f"{base}/ok.txt").text == "ok\n"
        for name in ("mine.txt", "twin.txt", "link.txt", "linkdir/host.txt"):
            reply = client.get(f"{base}/{name}")
            assert reply.status_code == 400 and "host file" not in reply.text, (name, reply.text)
        listed = {item["path"] for item in client.get(base).json()["items"]}
        assert "ok.txt" in listed and not listed & {"mine.txt", "twin.txt", "link.txt"}
        assert not any(path.startswith("linkdir") for path in listed)
        for long_name in ("x" * 256, "d" * 300 + "/f.txt", "é" * 200):
            reply = client.get(f"{base}/{quote(long_name)}")
            assert 400 <= reply.status_code < 500, (long_name[:10], reply.status_code)


def test_byte_ranges_for_previews(server: ServerProcess) -> None:
    command = "printf 0123456789 > digits.txt"
    handle = server.call("submit", task="command", task_name="ranges", command=command, shell=True)
    task_id = handle["answer"]["task_id"]
    server.call("wait_task", task_id=task_id, run_id=handle["answer"]["run_id"])
    url = f"/api/v1/tasks/{quote(task_id, safe='')}/files/digits.txt"
    with server.client() as client:
        whole = client.get(url)
        assert whole.status_code == 200 and whole.text == "0123456789"
        assert whole.headers["content-length"] == "10"
        assert whole.headers["content-type"] == "text/plain; charset=utf-8"
        assert whole.headers["cache-control"] == "no-store"
        assert whole.headers["content-disposition"] == 'attachment; filename="digits.txt"'
        for header, status, body in [
            ("bytes=0-3", 206, "0123"), ("bytes=7-", 206, "789"), ("bytes=-2", 206, "89"),
            ("bytes=5-99", 206, "56789"), ("bytes=0-1,4-5", 200, "0123456789"),
        ]:  # fmt: skip
            reply = client.get(url, headers={"range": header})
            assert (reply.status_code, reply.text) == (status, body), header
        part = client.get(url, headers={"range": "bytes=2-4"})
        assert part.headers["content-range"] == "bytes 2-4/10"
        beyond = client.get(url, headers={"range": "bytes=10-"})
        assert beyond.status_code == 416 and beyond.headers["content-range"] == "bytes */10"
