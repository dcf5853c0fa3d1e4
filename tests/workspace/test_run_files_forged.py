"""A kept run's folder is what its task wrote: forged entries never make the server read
outside it. Symlinks to host files, a file swapped for a FIFO, hard links, ``../`` names
and blob paths in a manifest, and a manifest the task planted in its own folder are
neither followed, stored nor served."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from runyard.errors import NoSuchFile, UnsafePath
from runyard.workspace import blobstore
from runyard.workspace.blobstore import blobs_root, stored_shas
from runyard.workspace.dedup import dedup_entry, manifest_path, read_manifest, wait_pending
from runyard.workspace.history import keep_current_run, run_dir
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus
from runyard.workspace.runfiles import list_run_files, open_run_file

TASK = "base#command#forged"
RUN = "a" * 32
SECRET = b"host secret, never to be served\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.type_dir("base").mkdir(parents=True)
    return ws


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(SECRET)
    return path


def make_run(workspace: Workspace, files: dict[str, bytes]) -> Path:
    folder = workspace.task_dir(TASK)
    folder.mkdir()
    status = TaskStatus(
        task_id=TASK, run_id=RUN, task_type="base", task_name="command",
        state=TaskState.SUCCEEDED, config={"task_name": "forged"}, created_at="2026-12-07T00:00:00Z",
    )  # fmt: skip
    workspace.write_status(status)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def keep(workspace: Workspace) -> Path:
    assert keep_current_run(workspace, TASK) == RUN
    dedup_entry(workspace, TASK, RUN)  # beside the background pass: they take one lock
    entry = run_dir(workspace, TASK, RUN)
    assert entry is not None
    return entry


def served(workspace: Workspace) -> dict[str, bytes]:
    found = {}
    for item in list_run_files(workspace, TASK, RUN):
        with open_run_file(workspace, TASK, RUN, item["path"]) as opened:
            found[item["path"]] = os.pread(opened.fd, 1 << 20, 0)
    return found


def no_secret_stored(workspace: Workspace) -> None:
    for sha, _ in stored_shas(workspace):
        blob = Path(blobs_root(workspace)) / sha[:2] / sha
        assert SECRET not in blob.read_bytes()


def test_symlinks_to_host_files_are_neither_stored_nor_served(workspace, secret):
    folder = make_run(workspace, {"ok.txt": b"mine\n"})
    (folder / "link.txt").symlink_to(secret)
    (folder / "dir").symlink_to(secret.parent)
    entry = keep(workspace)
    assert set(served(workspace)) == {"ok.txt", "status.json"}
    assert (entry / "link.txt").is_symlink()  # left as it was, never followed
    for name in ("link.txt", f"dir/{secret.name}"):
        with pytest.raises(UnsafePath):
            open_run_file(workspace, TASK, RUN, name)
    assert set(read_manifest(workspace, TASK, RUN)) == {"ok.txt"}
    no_secret_stored(workspace)


def test_a_hard_link_to_a_host_file_is_not_stored(workspace, secret):
    folder = make_run(workspace, {})
    os.link(secret, folder / "linked.txt")
    keep(workspace)
    assert "linked.txt" not in served(workspace)
    assert read_manifest(workspace, TASK, RUN) == {}
    no_secret_stored(workspace)


def test_a_file_swapped_for_a_fifo_hangs_nothing(workspace):
    folder = make_run(workspace, {"a.txt": b"a\n"})
    os.mkfifo(folder / "pipe.bin")
    done = threading.Event()
    worker = threading.Thread(target=lambda: (keep(workspace), done.set()), daemon=True)
    worker.start()
    assert done.wait(20), "keeping a run with a FIFO in it hung"
    assert set(served(workspace)) == {"a.txt", "status.json"}
    with pytest.raises(NoSuchFile):
        open_run_file(workspace, TASK, RUN, "pipe.bin")


def test_escaping_names_and_blob_paths_in_a_manifest_are_dropped(workspace, secret):
    make_run(workspace, {"ok.txt": b"fine\n"})
    keep(workspace)
    good = read_manifest(workspace, TASK, RUN)["ok.txt"]
    forged = {
        "ok.txt": good,
        "../../../secret.txt": good,
        "/etc/passwd": good,
        ".hidden": good,
        "up/../../x": good,
        "blob-path.txt": {"size": len(SECRET), "sha256": f"../../../../{secret}"},
        "short-sha.txt": {"size": 1, "sha256": "ab"},
        "bad-size.txt": {"size": -1, "sha256": good["sha256"]},
    }
    path = manifest_path(workspace, TASK, RUN)
    path.write_text(json.dumps({"files": forged}))
    assert set(read_manifest(workspace, TASK, RUN)) == {"ok.txt"}
    assert set(served(workspace)) == {"ok.txt", "status.json"}
    for name in ("../../../secret.txt", "/etc/passwd", "up/../../x", ".hidden"):
        with pytest.raises(UnsafePath):
            open_run_file(workspace, TASK, RUN, name)
    with pytest.raises(NoSuchFile):
        open_run_file(workspace, TASK, RUN, "blob-path.txt")


def test_a_manifest_the_task_planted_in_its_folder_is_not_trusted(workspace, secret):
    # the task knows where the server keeps manifests and writes one naming a stored blob
    make_run(workspace, {"ok.txt": b"fine\n"})
    keep(workspace)
    sha = read_manifest(workspace, TASK, RUN)["ok.txt"]["sha256"]
    other = "b" * 32
    workspace.task_dir(TASK).mkdir()
    plant = {"files": {"stolen.txt": {"size": 5, "sha256": sha}}}
    (workspace.task_dir(TASK) / f".{other}.files.json").write_text(json.dumps(plant))
    (workspace.task_dir(TASK) / "stolen.txt").symlink_to(secret)
    status = TaskStatus(
        task_id=TASK, run_id=other, task_type="base", task_name="command",
        state=TaskState.SUCCEEDED, config={"task_name": "forged"}, created_at="2026-12-07T01:00:00Z",
    )  # fmt: skip
    workspace.write_status(status)
    assert keep_current_run(workspace, TASK) == other
    dedup_entry(workspace, TASK, other)
    assert read_manifest(workspace, TASK, other) == {}
    assert [f["path"] for f in list_run_files(workspace, TASK, other)] == ["status.json"]
    with pytest.raises(UnsafePath):
        open_run_file(workspace, TASK, other, "stolen.txt")


def test_a_full_disk_while_storing_loses_nothing(workspace, monkeypatch):
    def full(source: int, target: int) -> tuple[str, int]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(blobstore, "_copy_hashing", full)  # the background pass too
    make_run(workspace, {"big.bin": b"x" * 100_000, "small.txt": b"s\n"})
    entry = keep(workspace)
    assert read_manifest(workspace, TASK, RUN) == {}
    assert (entry / "big.bin").read_bytes() == b"x" * 100_000  # still a plain file
    assert served(workspace)["big.bin"] == b"x" * 100_000
    assert served(workspace)["small.txt"] == b"s\n"
    assert not [n for n in os.listdir(blobs_root(workspace)) if n.startswith(".tmp-")]
    wait_pending(30)  # the keep's background pass ended, failing as this one did
    monkeypatch.undo()  # room again: the next pass stores both
    assert dedup_entry(workspace, TASK, RUN) == 2
    assert not (entry / "big.bin").exists()
    assert served(workspace)["big.bin"] == b"x" * 100_000
