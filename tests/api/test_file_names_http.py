"""File names are bytes: a task that writes names which are not UTF-8 stays succeeded, and
its listing, downloads, backup and sync carry them (runyard.workspace.filenames).

Through real parts: a ``command`` task run by a real server on 127.0.0.1, the listing and
download routes, ``runyard backup create/verify/restore`` and ``runyard sync push`` to a
second real server. A name is shown as text with each undecodable byte (and each
backslash) written ``\\xNN``; a file is downloaded by that name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from runyard.api.errormap import render
from runyard.errors import InvalidInput
from serverproc import ServerProcess, start_server

# on disk: two names that are not UTF-8 (one in a folder that is not either), a name of
# ASCII that looks like the first one's shown form, and a plain one
FILES = {
    b"bad\xff.txt": b"the bytes of bad\\xff\n",
    b"d\xfe/in\xfd.bin": b"nested",
    b"bad\\xff.txt": b"a lookalike with a real backslash\n",
    b"good.txt": b"good\n",
}
SHOWN = {
    b"bad\xff.txt": "bad\\xff.txt",
    b"d\xfe/in\xfd.bin": "d\\xfe/in\\xfd.bin",
    b"bad\\xff.txt": "bad\\x5cxff.txt",
    b"good.txt": "good.txt",
}
LOOKALIKE = b"bad\\xff.txt"
# octal escapes for printf: every name and content written byte for byte by the task
WRITES = [
    "mkdir -p \"$(printf 'd\\376')\"",
    "printf 'the bytes of bad\\\\xff\\n' > \"$(printf 'bad\\377.txt')\"",
    "printf nested > \"$(printf 'd\\376/in\\375.bin')\"",
    "printf 'a lookalike with a real backslash\\n' > 'bad\\xff.txt'",
    "printf 'good\\n' > good.txt",
]
COMMAND = "; ".join(WRITES)
BYTES_ONLY = "; ".join(line for line in WRITES if "lookalike" not in line)


@dataclass
class World:
    srv: ServerProcess
    task_id: str
    final: dict[str, Any]
    root: Path

    @property
    def folder(self) -> bytes:
        return os.fsencode(self.srv.workspace / "base" / self.task_id)

    @property
    def files_url(self) -> str:
        return f"/api/v1/tasks/{self.task_id.replace('#', '%23')}/files"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("file-names")
    srv = start_server(root / "a", token="file-names-token")
    try:
        final = run_task(srv, "command", command=COMMAND, shell=True, task_name="b")
        yield World(srv, final["task_id"], final, root)
    finally:
        srv.stop()


def runyard(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    argv = [sys.executable, "-m", "runyard", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=110, env=env)


def on_disk(folder: bytes) -> dict[bytes, bytes]:
    """Every file under ``folder`` by its relative name in bytes (records left out)."""
    found = {}
    for top, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(top, name)
            relative = os.path.relpath(path, folder)
            if relative in FILES:
                with open(path, "rb") as handle:
                    found[relative] = handle.read()
    return found


def test_the_task_stays_succeeded_and_records_only_text_names(world: World) -> None:
    assert world.final["state"] == "succeeded", world.final
    assert on_disk(world.folder) == FILES  # the task wrote what the test means
    assert set(world.final["result"]["artifacts"]) == {"good.txt"}
    log = world.srv.call("read_task_log", task_id=world.task_id, offset=0)["answer"]["content"]
    for shown in ("bad\\xff.txt", "d\\xfe/in\\xfd.bin"):
        assert f"not recorded as an artifact: {shown} (an artifact's name must be UTF-8" in log
    # a backslash is refused too (as before), and fails the task no more than a byte does
    assert "not recorded as an artifact: bad\\x5cxff.txt (NUL and backslash" in log


def test_the_listing_shows_each_name_in_the_one_form_and_downloads_by_it(world: World) -> None:
    with world.srv.client() as client:
        reply = client.get(world.files_url)
        assert reply.status_code == 200, reply.text
        listed = {item["path"]: item["size"] for item in reply.json()["items"]}
        for raw, shown in SHOWN.items():
            assert listed[shown] == len(FILES[raw]), (shown, listed)
        for raw in (b"bad\xff.txt", b"d\xfe/in\xfd.bin", b"good.txt"):
            got = client.get(f"{world.files_url}/{quote(SHOWN[raw])}")
            assert got.status_code == 200, got.text
            assert got.content == FILES[raw]
            assert "filename" in got.headers["content-disposition"]
        # the lookalike's shown name takes back its real backslash: refused as ever, never
        # served as the other file
        lookalike = client.get(f"{world.files_url}/{quote(SHOWN[LOOKALIKE])}")
        assert lookalike.status_code == 400 and b"bytes of" not in lookalike.content


@pytest.mark.parametrize(
    "shown", ["bad\\xFF.txt", "bad\\x.txt", "bad\\xff", "b\\x61d\\xff.txt", "nothere\\xff.txt"]
)
def test_a_name_not_in_the_one_form_or_of_no_file_is_a_4xx(world: World, shown: str) -> None:
    with world.srv.client() as client:
        reply = client.get(f"{world.files_url}/{quote(shown)}")
    assert reply.status_code in (400, 404), reply.text
    assert b"bytes of" not in reply.content
    assert "Traceback" not in "".join(world.srv.output)


def test_a_backup_creates_verifies_and_restores_the_names_byte_exact(world: World) -> None:
    archive = world.root / "names.tar.gz"
    created = runyard("backup", "create", archive, "--workspace-dir", world.srv.workspace,
                      "--log-dir", world.srv.log_dir)  # fmt: skip
    assert created.returncode == 0, created.stderr
    verified = runyard("backup", "verify", archive)
    assert verified.returncode == 0, verified.stderr
    restored_ws = world.root / "restored" / "ws"
    restored = runyard("backup", "restore", archive, "--workspace-dir", restored_ws,
                       "--log-dir", world.root / "restored" / "logs")  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    folder = os.fsencode(restored_ws / "base" / world.task_id)
    assert on_disk(folder) == FILES


def test_sync_push_carries_the_names_byte_exact(world: World) -> None:
    # a task of the names that are not UTF-8 only: the one with a backslash is refused by
    # receivers, as before (its reason is the report's), and holds nothing else back
    synced = run_task(world.srv, "command", command=BYTES_ONLY, shell=True, task_name="s")
    assert synced["state"] == "succeeded", synced
    bytes_only = {raw: data for raw, data in FILES.items() if raw != LOOKALIKE}
    receiver = start_server(world.root / "b", token="receiver-token")
    try:
        report = json.loads(push(world, receiver).stdout)
        assert report["sent"] == [synced["task_id"]], report
        assert report["refused"] == [world.task_id] and "backslash" in str(report["reasons"])
        received = os.fsencode(receiver.workspace / "base" / synced["task_id"])
        assert on_disk(received) == bytes_only
        assert receiver.call("status", task_id=synced["task_id"])["answer"]["state"] == "succeeded"
        with receiver.client() as client:
            url = f"/api/v1/tasks/{synced['task_id'].replace('#', '%23')}/files"
            reply = client.get(url)
            assert reply.status_code == 200, reply.text
            listed = {item["path"] for item in reply.json()["items"]}
            assert {SHOWN[raw] for raw in bytes_only} <= listed
            raw = b"bad\xff.txt"
            got = client.get(f"{url}/{quote(SHOWN[raw])}")
            assert got.status_code == 200 and got.content == FILES[raw]
        again = json.loads(push(world, receiver).stdout)
        assert again["sent"] == [] and again["skipped"] == [synced["task_id"]], again
    finally:
        receiver.stop()
    assert "Traceback" not in "".join(receiver.output)


def push(world: World, receiver: ServerProcess) -> subprocess.CompletedProcess[str]:
    pushed = runyard("sync", "push", "--json", "--workspace-dir", world.srv.workspace,
                     "--log-dir", world.srv.log_dir, "--url", receiver.url,
                     "--token", "receiver-token")  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr + pushed.stdout
    return pushed


def run_task(srv: ServerProcess, task: str, **inputs: Any) -> dict[str, Any]:
    answer = srv.call("submit", task=task, **inputs)["answer"]
    return srv.call(
        "wait_task", task_id=answer["task_id"], run_id=answer["run_id"], poll_interval=0.05
    )["answer"]


@pytest.mark.parametrize("path", ["/jobs/status", "/api/v1/tasks/x/files"])
def test_a_message_naming_such_a_file_still_answers_json(path: str) -> None:
    # messages name files as str() formats them: the one table writes surrogates out
    name = b"bad\xff.txt".decode("utf-8", "surrogateescape")
    answer = render(InvalidInput(f"cannot read {name} in x"), path)
    assert answer.status_code < 500  # the Job API answers a failed job 200, as ever
    assert "cannot read bad\\\\xff.txt in x" in bytes(answer.body).decode("utf-8")
