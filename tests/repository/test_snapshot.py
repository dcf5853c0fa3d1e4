"""The index snapshot: a restart takes unchanged folders from it and reads the others; a
snapshot that is damaged, foreign, of another format or workspace, or a symlink is refused
and the answers are read from the files.

The observable of a folder taken from the snapshot (not read): its status rewritten in
place while the index was down, same inode, same size, same mtime, shows the old state
until the task is read directly. Every such rewrite below turns ``succeeded`` into
``cancelled`` (same length).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import marshal
import os
import secrets
import struct
import subprocess
import sys
import tarfile
import time
from array import array
from collections.abc import Callable, Iterator
from hashlib import sha256
from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_metadata, put_status

from runyard.backup import create_backup
from runyard.repository import TaskRepository
from runyard.repository.arrangement import Arrangement
from runyard.repository.records import (
    RECORDS_FORMAT,
    TaskFolder,
    list_task_folders,
    scan_folder,
)
from runyard.repository.scan import collect_stamps, start_stamping
from runyard.repository.snapshot import (
    KEY_FILE,
    MAGIC,
    SNAPSHOT_DIR,
    SNAPSHOT_FILE,
    Columns,
    SnapshotStore,
)
from runyard.workspace import Workspace

pytestmark = pytest.mark.timeout(60)

TASKS = [f"base#demo#t{n}" for n in range(6)]
SNEAKY = "base#demo#t2"
HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


def snapshot_path(ws: Workspace) -> Path:
    return ws.root / SNAPSHOT_DIR / SNAPSHOT_FILE


def workspace(tmp_path: Path, *, aged: bool = True) -> Workspace:
    """Tasks whose folders look untouched for an hour (the start's catch-up reads none),
    and whose records do too when ``aged`` (else they are racy: written just now)."""
    ws = make_workspace(tmp_path)
    for n, task_id in enumerate(TASKS):
        put_status(ws, task_id, created=n)
    put_metadata(ws, "base#demo#t1", created=1)
    if aged:
        age(*ws.root.glob("*/*/*.json"))
    age_folders(ws)
    return ws


def age(*paths: Path) -> None:
    for path in paths:
        os.utime(path, ns=(HOUR_AGO_NS, HOUR_AGO_NS))


def age_folders(ws: Workspace) -> None:
    age(*ws.root.glob("*/*"), *ws.root.glob("*"))


def start(ws: Workspace) -> TaskRepository:
    repo = TaskRepository(ws, snapshots=True)
    repo.start()
    return repo


def run_once(ws: Workspace) -> None:
    """A start and a clean stop: the snapshot is written."""
    start(ws).stop()
    assert snapshot_path(ws).is_file()


def rewrite_in_place(ws: Workspace, task_id: str, *, keep_mtime: bool = True) -> None:
    """``succeeded`` -> ``cancelled`` in the status file itself (same inode and size)."""
    path = ws.status_path(task_id)
    before = os.stat(path)
    data = path.read_bytes()
    assert b'"succeeded"' in data
    with path.open("r+b") as stream:
        stream.write(data.replace(b'"succeeded"', b'"cancelled"'))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)


def states(repo: TaskRepository) -> dict[str, str]:
    return {status.task_id: status.state.value for status in repo.list_statuses()[0]}


@contextlib.contextmanager
def restarted(ws: Workspace) -> Iterator[TaskRepository]:
    repo = start(ws)
    try:
        yield repo
    finally:
        repo.stop()


def test_a_restart_takes_unchanged_folders_from_the_snapshot(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    rewrite_in_place(ws, SNEAKY)
    with restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "succeeded"  # not read: the stat is the same
        assert len(repo) == len(TASKS)
        assert repo.get_metadata("base#demo#t1") is not None
        status = repo.get(SNEAKY)  # a direct read is the file's
        assert status is not None and status.state.value == "cancelled"
        assert states(repo)[SNEAKY] == "cancelled"


def test_a_record_changed_in_place_with_a_newer_mtime_is_read_again(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    rewrite_in_place(ws, SNEAKY, keep_mtime=False)
    with restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "cancelled"


def test_a_record_modified_just_before_it_was_read_is_read_again(tmp_path: Path) -> None:
    ws = workspace(tmp_path, aged=False)  # written now: the same timestamp tick could hide
    run_once(ws)  # a second write, so the entries are racy
    rewrite_in_place(ws, SNEAKY)
    with restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "cancelled"


def test_a_status_replaced_by_a_worker_while_down_is_seen(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    put_status(ws, SNEAKY, state="cancelled", created=2)  # a new file: another inode
    age(ws.status_path(SNEAKY))
    age_folders(ws)
    with restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "cancelled"


def test_folders_added_and_removed_while_down_are_seen(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    for path in ws.task_dir("base#demo#t0").iterdir():
        path.unlink()
    ws.task_dir("base#demo#t0").rmdir()
    put_status(ws, "etl#load#new", state="failed", created=50)
    with restarted(ws) as repo:
        assert "base#demo#t0" not in states(repo)
        assert states(repo)["etl#load#new"] == "failed"
        assert repo.get_metadata("base#demo#t1") is not None


def test_changes_while_running_are_in_the_next_snapshot(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    with restarted(ws) as repo:
        put_status(ws, "base#demo#t3", state="failed", created=3)
        repo.refresh("base#demo#t3")
        put_status(ws, "train#fit#late", state="succeeded", created=60)
        repo.refresh("train#fit#late")
    rewrite_in_place(ws, SNEAKY)  # unchanged in the index: its entry was kept
    with restarted(ws) as repo:
        found = states(repo)
    assert found["base#demo#t3"] == "failed"
    assert found["train#fit#late"] == "succeeded"
    assert found[SNEAKY] == "succeeded"
    assert len(found) == len(TASKS) + 1


def resign(ws: Workspace, data: bytes) -> None:
    key = (ws.root / SNAPSHOT_DIR / KEY_FILE).read_bytes()
    snapshot_path(ws).write_bytes(data + hmac.new(key, data, sha256).digest())


def damage(ws: Workspace, how: str, tmp_path: Path) -> Workspace:
    path = snapshot_path(ws)
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(flipped))
    elif how == "version":  # signed with the right key, of another records format
        at = len(MAGIC) + 2
        body = data[: -sha256().digest_size]
        resign(ws, body[:at] + struct.pack(">H", RECORDS_FORMAT + 1) + body[at + 2 :])
    elif how == "key":
        (ws.root / SNAPSHOT_DIR / KEY_FILE).write_bytes(secrets.token_bytes(32))
    elif how == "shared":
        path.chmod(0o644)
    elif how == "symlink":
        aside = tmp_path / "aside"
        path.rename(aside)
        path.symlink_to(aside)
    elif how == "workspace":  # the same folders (same inodes) at another path
        moved = ws.root.with_name("moved")
        ws.root.rename(moved)
        return Workspace.open(moved, ws.log_dir)
    return ws


@pytest.mark.parametrize(
    "how", ["truncated", "flipped", "version", "key", "shared", "symlink", "workspace"]
)
def test_a_bad_snapshot_is_refused_and_the_files_are_read(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    rewrite_in_place(ws, SNEAKY)
    ws = damage(ws, how, tmp_path)
    with caplog.at_level(logging.WARNING, logger="runyard.repository"), restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "cancelled"
        assert len(repo) == len(TASKS)
        assert repo.get_metadata("base#demo#t1") is not None
    assert caplog.text.count("snapshot") >= 1
    if how == "symlink":  # not written through either: the link was replaced
        assert not snapshot_path(ws).is_symlink()
        assert (tmp_path / "aside").read_bytes()[: len(MAGIC)] == MAGIC


def previous_format(ws: Workspace) -> None:
    """Rewrite the snapshot as format 2 wrote it (both numbers 2), signed with the right
    key: each status record ended with its log's digest (an int), and the arrangement
    with the sorted digests after its buckets."""
    store = SnapshotStore(ws.root)
    key = store.key(create=False)
    chunks = list(store.load(key))
    *columns, arranged = chunks
    assert isinstance(arranged, Arrangement)
    digests: list[int] = []
    body = bytearray(MAGIC)
    layout = (int(sys.byteorder == "little"), array("I").itemsize)
    body += struct.pack(">HHHBBBB", 2, 2, marshal.version, *sys.version_info[:2], *layout)
    info = os.stat(ws.root)
    identity = marshal.dumps((str(ws.root), info.st_dev, info.st_ino))
    body += struct.pack(">Q", len(identity)) + identity
    for chunk in columns:
        assert isinstance(chunk, Columns)
        statuses, metadata = [], []
        for status, meta in zip(chunk.statuses, chunk.metadata, strict=True):
            old = None if status is None else (*status, 1 << 40 | len(digests))
            if old is not None:
                digests.append(old[-1])
            statuses.append(old)
            metadata.append(old if meta is not None and meta is status else meta)
        data = marshal.dumps((chunk.ids, chunk.stamps, statuses, metadata))
        body += struct.pack(">Q", len(data)) + data
    buckets = [(kind, state, ids.tobytes()) for (kind, state), ids in arranged.buckets.items()]
    logs = array("q", sorted(digests)).tobytes()
    data = marshal.dumps((arranged.order.tobytes(), buckets, logs))
    body += struct.pack(">Q", len(data)) + data
    resign(ws, bytes(body))


def test_a_snapshot_of_the_previous_format_is_refused_and_the_next_one_is_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Format 2 kept a log digest in every status record: its header names it, so it is
    refused whole (one warning), every folder is read, and the stop writes this format."""
    ws = workspace(tmp_path)
    run_once(ws)
    previous_format(ws)
    rewrite_in_place(ws, SNEAKY)
    with caplog.at_level(logging.WARNING, logger="runyard.repository"), restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "cancelled"  # read, not taken from the snapshot
        assert len(repo) == len(TASKS)
        assert repo.get_metadata("base#demo#t1") is not None
    warnings = [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
    assert len(warnings) == 1 and "of another format (2, 2," in warnings[0]
    caplog.clear()
    rewrite_in_place(ws, "base#demo#t4")
    with caplog.at_level(logging.WARNING, logger="runyard.repository"), restarted(ws) as repo:
        assert states(repo)["base#demo#t4"] == "succeeded"  # taken from the new snapshot
        assert states(repo)[SNEAKY] == "cancelled"
    assert "snapshot" not in caplog.text


def test_the_snapshot_folder_and_files_are_the_servers_alone(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    folder = ws.root / SNAPSHOT_DIR
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert snapshot_path(ws).stat().st_mode & 0o777 == 0o600


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_leaves_the_old_snapshot(tmp_path: Path, small_disk: Path) -> None:
    ws = workspace(small_disk)
    run_once(ws)
    before = snapshot_path(ws).read_bytes()
    repo = start(ws)
    put_status(ws, "base#demo#t4", state="failed", created=4)
    repo.refresh("base#demo#t4")  # a change: the stop writes a snapshot
    filler = fill(small_disk)
    repo.stop()
    assert snapshot_path(ws).read_bytes() == before
    assert sorted(p.name for p in (ws.root / SNAPSHOT_DIR).iterdir()) == [KEY_FILE, SNAPSHOT_FILE]
    filler.unlink()
    with restarted(ws) as repo:
        assert states(repo)["base#demo#t4"] == "failed"


@pytest.mark.parametrize("misfit", ["records", "lengths"])
def test_records_that_do_not_fit_the_index_are_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, misfit: str
) -> None:
    ws = workspace(tmp_path)
    store = SnapshotStore(ws.root)
    key = store.key(create=True)
    stamper = store.stamper(key, time.time_ns())
    folders = list_task_folders(ws.root)
    columns = Columns(
        [task_id for task_id, _, _ in folders],
        [stamper.stamp_now(path, inode) for _, path, inode in folders],
        [("not", "a", "status") for _ in folders],  # signed and of this format, yet wrong
        [None for _ in folders],
    )
    if misfit == "lengths":
        columns = columns._replace(statuses=[None], metadata=[])
    everyone = array("I", range(len(folders)))  # an arrangement that fits the entries
    arranged = Arrangement(everyone, {("base", "succeeded"): everyone})
    store.write(key, [columns], lambda: arranged)
    with caplog.at_level(logging.WARNING, logger="runyard.repository"), restarted(ws) as repo:
        assert states(repo) == {task_id: "succeeded" for task_id in TASKS}
        assert repo.get_metadata("base#demo#t1") is not None
    assert "snapshot is not used" in caplog.text


def test_a_backup_leaves_the_snapshot_and_its_key_out(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    archive = tmp_path / "backup.tar"
    manifest = create_backup(ws.root, ws.log_dir, archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert not [name for name in names if SNAPSHOT_DIR in name]
    assert f"workspace/{TASKS[0].split('#')[0]}/{TASKS[0]}/status.json" in names
    skipped = {entry["path"]: entry["reason"] for entry in manifest.skipped}
    assert "index snapshot" in skipped[f"workspace/{SNAPSHOT_DIR}"]


@pytest.mark.parametrize("python", [sys.executable, "/bin/false"])
def test_stamps_from_the_helper_equal_stamps_made_here(tmp_path: Path, python: str) -> None:
    ws = workspace(tmp_path)
    folders = list_task_folders(ws.root)
    stamper = SnapshotStore(ws.root).stamper(secrets.token_bytes(32), time.time_ns())
    split, helper = start_stamping(folders, stamper, parallel_min=1, python=python)
    assert 0 < split < len(folders) and helper is not None
    theirs = collect_stamps(helper, folders[split:], stamper)
    assert theirs == [stamper.stamp_now(path, inode) for _, path, inode in folders[split:]]
    assert all(stamp != 0 for stamp in theirs)  # aged records: none is racy


def test_a_stamped_read_equals_the_index_own_read(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    put_metadata(ws, "etl#load#meta-only", created=9)
    ws.task_dir("base#demo#empty").mkdir()
    ws.status_path("base#demo#t0").write_text("{broken")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(ws.status_path("base#demo#t3").read_bytes())
    ws.status_path("base#demo#t3").unlink()
    ws.status_path("base#demo#t3").symlink_to(elsewhere)
    os.mkfifo(ws.metadata_path("base#demo#t4"))
    folders = list_task_folders(ws.root)
    stamper = SnapshotStore(ws.root).stamper(secrets.token_bytes(32), time.time_ns())
    captured = [stamper.capture(path, task_id, inode) for task_id, path, inode in folders]
    assert [records for records, _ in captured] == [scan_folder(p, t) for t, p, _ in folders]
    assert [stamp for _, stamp in captured] == [stamper.stamp_now(p, i) for _, p, i in folders]


def test_stamps_made_from_the_parent_folder_equal_stamps_of_whole_paths(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    put_metadata(ws, "etl#load#meta-only", created=9)
    ws.task_dir("base#demo#empty").mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(ws.status_path("base#demo#t3").read_bytes())
    ws.status_path("base#demo#t3").unlink()
    ws.status_path("base#demo#t3").symlink_to(elsewhere)  # the link's own stat, not its file's
    os.mkfifo(ws.metadata_path("base#demo#t4"))
    folders = [(path, inode) for _, path, inode in list_task_folders(ws.root)]
    folders.append((str(tmp_path / "gone" / "base#demo#t9"), 1))  # a parent that is not there
    stamper = SnapshotStore(ws.root).stamper(secrets.token_bytes(32), time.time_ns())
    made_here = [stamper.stamp_now(path, inode) for path, inode in folders]
    assert stamper.stamps_now(folders) == made_here
    assert len(set(made_here)) == len(made_here)  # each folder's own


def test_a_write_cut_short_leaves_no_temp_file_behind_a_restart(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run_once(ws)
    left = ws.root / SNAPSHOT_DIR / f".{SNAPSHOT_FILE}.0123456789ab.tmp"  # a kill -9 mid-write
    left.write_bytes(b"half")
    with restarted(ws) as repo:
        assert states(repo)[SNEAKY] == "succeeded"
    assert not left.exists()


class ChangedAfterLoad(TaskRepository):
    """A repository whose workspace changes after its load and before its watches."""

    def __init__(self, ws: Workspace, change: Callable[[], None]) -> None:
        super().__init__(ws, watch_mode="sparse", snapshots=True)
        self._change = change

    def _load(self, folders: list[TaskFolder]) -> None:
        super()._load(folders)
        self._change()


def test_an_active_task_changed_before_the_watches_is_read_again(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    put_status(ws, "train#fit#busy", state="running", created=7)
    put_status(ws, "train#fit#idle", state="running", created=8)
    age(*ws.root.glob("train/*/*.json"))
    age_folders(ws)
    run_once(ws)

    def change() -> None:
        put_status(ws, "train#fit#busy", state="failed", created=7)  # a worker's last write
        age(ws.status_path("train#fit#busy"))

    repo = ChangedAfterLoad(ws, change)
    repo.start()
    try:
        assert states(repo)["train#fit#busy"] == "failed"
        assert states(repo)["train#fit#idle"] == "running"
    finally:
        repo.stop()
