"""A task rewrites its own status.json (its folder is writable by it) to make a push send a
host file as its log, or write the log somewhere else on the receiver. The sender sends
only what it derives from the ids; the receiver writes only where its layout says."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_helpers import push_json, run_task, task_dir

from runyard.sync.tarstream import task_tar_stream
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

SECRET = b"root-only host secret 4f1c9a"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    sender = start_server(tmp_path / "a")
    try:
        receiver = start_server(tmp_path / "b")
        try:
            yield sender, receiver
        finally:
            receiver.stop()
    finally:
        sender.stop()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file only the server's user may read, outside every workspace."""
    path = tmp_path / "host" / "shadow"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def _forge(srv: ServerProcess, task_id: str, **fields: Any) -> None:
    """What code in the task's sandbox can do: rewrite its status.json."""
    path = task_dir(srv, task_id) / "status.json"
    status = json.loads(path.read_text())
    status.update(fields)
    path.write_text(json.dumps(status))


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
    return found


def _names_under(root: Path, part: str) -> list[str]:
    return [
        os.path.join(folder, name)
        for folder, dirs, names in os.walk(root)
        for name in dirs + names
        if part in name
    ]


def _tar_members(stream: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r|") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isreg() else b"") for m in tar}  # type: ignore[union-attr]


def test_a_forged_status_sends_no_host_file_and_writes_nothing_outside(
    pair: tuple[ServerProcess, ServerProcess], secret: Path, tmp_path: Path
) -> None:
    sender, receiver = pair
    honest = run_task(sender, "command", command="echo honest-log", shell=True, task_name="honest")
    escape = run_task(sender, "command", command="echo escape-log", shell=True, task_name="escape")
    swap = run_task(sender, "command", command="echo swap-log", shell=True, task_name="swap")
    linked = run_task(sender, "command", command="echo linked-log", shell=True, task_name="linked")
    # a run_id that climbs out of the log folder, and the host file as the log
    _forge(sender, escape["task_id"], run_id="../../../PWNED", log_path=str(secret))
    # a run_id that is fine, the host file as the log
    _forge(sender, swap["task_id"], log_path=str(secret))
    # links in the folder to the host file and its folder
    folder = task_dir(sender, linked["task_id"])
    (folder / "leak.txt").symlink_to(secret)
    (folder / "leakdir").symlink_to(secret.parent, target_is_directory=True)
    (folder / "kept.txt").write_text("kept")

    workspace = Workspace.open(sender.workspace, sender.log_dir)
    for task in (swap, linked):
        sniffed = b"".join(task_tar_stream(workspace, workspace.read_status(task["task_id"])))
        assert SECRET not in sniffed
    members = _tar_members(
        b"".join(task_tar_stream(workspace, workspace.read_status(swap["task_id"])))
    )
    assert b"swap-log" in members["log"]  # the run's own log, from the path the ids give
    linked_members = _tar_members(
        b"".join(task_tar_stream(workspace, workspace.read_status(linked["task_id"])))
    )
    assert "task/kept.txt" in linked_members
    assert not {"task/leak.txt", "task/leakdir", "task/leakdir/shadow"} & set(linked_members)

    report = push_json(sender, receiver)
    assert sorted(report["sent"]) == sorted([honest["task_id"], swap["task_id"], linked["task_id"]])
    assert report["refused"] == [escape["task_id"]]
    assert "status.json is not a valid status" in report["reasons"][escape["task_id"]]

    assert not task_dir(receiver, escape["task_id"]).exists()
    swapped = receiver.call("status", task_id=swap["task_id"])["answer"]
    expected_log = receiver.log_dir / "base" / swap["task_id"] / f"{swap['run_id']}.log"
    assert Path(swapped["log_path"]) == expected_log.resolve()
    assert b"swap-log" in expected_log.read_bytes()
    log = receiver.call("read_task_log", task_id=swap["task_id"], offset=0)["answer"]
    assert "swap-log" in log["content"]
    assert not (task_dir(receiver, linked["task_id"]) / "leak.txt").exists()
    assert not (task_dir(receiver, linked["task_id"]) / "leakdir").exists()

    # nowhere under the test's folder: no PWNED file or folder, no copy of the secret
    assert _names_under(tmp_path, "PWNED") == []
    assert _files_holding(tmp_path, SECRET) == [secret]


def test_a_task_that_breaks_its_folder_is_reported_and_the_rest_still_sync(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    sender, receiver = pair
    fine = run_task(sender, "command", command="echo fine", shell=True, task_name="fine")
    nested = run_task(sender, "command", command="echo nested", shell=True, task_name="nested")
    deep = run_task(sender, "command", command="echo deep", shell=True, task_name="deep")
    # a status nested 100,000 levels (Python's json recursed until it failed)
    path = task_dir(sender, nested["task_id"]) / "status.json"
    raw = path.read_bytes().rstrip()
    path.write_bytes(raw[:-1] + b', "deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    # folders 40 levels deep: a receiver refuses more than 32
    folder = task_dir(sender, deep["task_id"]).joinpath(*["d"] * 40)
    folder.mkdir(parents=True)
    (folder / "f.txt").write_text("deep")

    report = push_json(sender, receiver)
    assert report["sent"] == [fine["task_id"]]
    assert sorted(report["refused"]) == sorted([nested["task_id"], deep["task_id"]])
    assert "status.json is not a valid status" in report["reasons"][nested["task_id"]]
    assert "deeper than 32" in report["reasons"][deep["task_id"]]
    assert not task_dir(receiver, nested["task_id"]).exists()
    assert not task_dir(receiver, deep["task_id"]).exists()
