"""The index a start takes from a snapshot's arrangement is the index of the files: the
same records, list order, buckets, active tasks, children and named logs as an index
built by reading every folder, whatever changed while the server was down.

A few changes at start do not rewrite the snapshot (the next start reads those folders
again); a snapshot written after a start without one holds its entries in list order.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import shutil
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_metadata, put_status

from runyard.repository import TaskRepository
from runyard.repository.arrangement import Arrangement, Arranger, ascending, mostly_ascending
from runyard.repository.index import TaskIndex
from runyard.repository.records import INSTANT, list_task_folders
from runyard.repository.scan import scan_all
from runyard.repository.snapshot import SNAPSHOT_DIR, SNAPSHOT_FILE, Columns, SnapshotStore
from runyard.workspace import Workspace

pytestmark = pytest.mark.timeout(60)

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9
TYPES = ["base", "etl", "train"]
STATES = ["queued", "running", "succeeded", "failed", "cancelled"]


def age_all(ws: Workspace) -> None:
    """Records and folders untouched for an hour: none is racy, no catch-up reads them."""
    for path in [*ws.root.glob("*/*/*"), *ws.root.glob("*/*"), *ws.root.glob("*")]:
        if SNAPSHOT_DIR not in path.parts:
            os.utime(path, ns=(HOUR_AGO_NS, HOUR_AGO_NS), follow_symlinks=False)


def varied_workspace(tmp_path: Path, count: int = 60, seed: int = 5) -> Workspace:
    """Tasks of every type and state, created out of name order with ties, lineage
    (metadata naming other parents than the status, now and then), shared logs, a
    metadata-only folder and one with no records."""
    rng = random.Random(seed)
    ws = make_workspace(tmp_path)
    ids = [f"{rng.choice(TYPES)}#job#t{rng.randrange(10**6):06d}x{n}" for n in range(count)]
    for n, task_id in enumerate(ids):
        earlier = ids[:n]
        sources = ",".join(rng.sample(earlier, min(len(earlier), rng.randrange(3))))
        created = rng.randrange(count // 3)  # ties
        log = tmp_path / "logs" / f"run{rng.randrange(count // 2)}.log"  # shared logs
        put_status(ws, task_id, state=rng.choice(STATES), created=created, sources=sources,
                   log_path=str(log) if n % 4 else "")  # fmt: skip
        if n % 3 == 0:
            other = sources if n % 2 else ",".join(earlier[-1:])
            put_metadata(ws, task_id, created=created + (n % 5 == 0), sources=other)
    put_metadata(ws, "etl#load#meta-only", created=3, sources=ids[0])
    ws.task_dir("base#job#empty").mkdir()
    age_all(ws)
    return ws


def index_of_files(ws: Workspace) -> TaskIndex:
    index = TaskIndex()
    index.load(scan_all(list_task_folders(ws.root)))
    return index


def state_of(index: TaskIndex) -> dict[str, object]:
    """Everything the index holds (its lists are private: compared whole)."""
    buckets = [(kind, state) for kind in TYPES for state in STATES]
    return {
        "statuses": index.statuses,
        "metadata": {task_id: meta[:3] for task_id, meta in index.metadata.items()},
        "shared": {t for t, meta in index.metadata.items() if meta is index.statuses.get(t)},
        "order": index.ids(buckets),
        "buckets": {bucket: index.ids([bucket]) for bucket in buckets},
        "counts": index.counts(),
        "active": index.active_ids(),
        "children": index.children,
        "whole order": list(index._order),
    }


def restart_index(ws: Workspace) -> TaskIndex:
    repo = TaskRepository(ws, snapshots=True)
    repo.start()
    try:
        return repo._index
    finally:
        repo.stop()


def snapshot_path(ws: Workspace) -> Path:
    return ws.root / SNAPSHOT_DIR / SNAPSHOT_FILE


def arrangement_on_disk(ws: Workspace) -> tuple[list[str], Arrangement]:
    store = SnapshotStore(ws.root)
    ids: list[str] = []
    arrangement = None
    for chunk in store.load(store.key(create=False)):
        if isinstance(chunk, Columns):
            ids += chunk.ids
        else:
            arrangement = chunk
    assert arrangement is not None
    return ids, arrangement


def change_while_down(ws: Workspace, tmp_path: Path) -> None:
    """Statuses replaced, a folder removed, a rerun (new folder, new created_at), new
    folders older and newer than the rest, a log no longer named."""
    folders = sorted(task_id for task_id, _, _ in list_task_folders(ws.root))
    statuses = [task_id for task_id in folders if ws.status_path(task_id).exists()]
    put_status(ws, statuses[1], state="failed", created=2, sources=statuses[0])
    put_status(ws, statuses[2], state="succeeded", created=40, log_path="")
    shutil.rmtree(ws.task_dir(statuses[3]))
    shutil.rmtree(ws.task_dir(statuses[4]))
    put_status(ws, statuses[4], state="queued", created=90, sources=statuses[5])
    put_status(ws, "train#job#older", state="running", created=0, sources=statuses[6],
               log_path=str(tmp_path / "logs" / "run1.log"))  # fmt: skip
    put_status(ws, "etl#job#newer", state="succeeded", created=99)
    put_metadata(ws, "etl#job#newer", created=99, sources=statuses[7])
    age_all(ws)


def test_a_start_from_the_snapshot_has_the_index_of_the_files(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path)
    restart_index(ws)  # no snapshot: every folder read, then written
    assert state_of(restart_index(ws)) == state_of(index_of_files(ws))


def test_changes_while_down_are_merged_into_the_arrangement(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path)
    restart_index(ws)
    change_while_down(ws, tmp_path)
    assert state_of(restart_index(ws)) == state_of(index_of_files(ws))
    change_while_down(ws, tmp_path)  # once more, from the snapshot the last stop wrote
    assert state_of(restart_index(ws)) == state_of(index_of_files(ws))


def test_changes_while_running_are_arranged_in_the_next_snapshot(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path)
    restart_index(ws)
    repo = TaskRepository(ws, snapshots=True)
    repo.start()
    try:
        for n, task_id in enumerate(sorted(repo._index.statuses)[:12]):
            put_status(ws, task_id, state=STATES[n % 5], created=100 - n)  # moved in order
            repo.refresh(task_id)
        put_status(ws, "base#job#late", state="running", created=1)
        repo.refresh("base#job#late")
    finally:
        repo.stop()  # writes: the changed ones read again in their place, the new at the end
    age_all(ws)
    assert state_of(restart_index(ws)) == state_of(index_of_files(ws))


def test_a_few_changes_at_start_leave_the_snapshot_as_it_is(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path, count=150)
    restart_index(ws)
    before = snapshot_path(ws).stat()
    task_id = sorted(index_of_files(ws).statuses)[7]
    put_status(ws, task_id, state="failed", created=1)
    age_all(ws)
    for _ in range(2):  # one change in 150: not worth a write, at start or at stop
        assert restart_index(ws).statuses[task_id][4] == "failed"
        after = snapshot_path(ws).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_many_changes_at_start_rewrite_the_snapshot(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path, count=150)
    restart_index(ws)
    before = snapshot_path(ws).stat().st_ino
    for task_id in sorted(index_of_files(ws).statuses)[:8]:  # 8 of 150: one in 20 is 7
        put_status(ws, task_id, state="failed", created=1)
    age_all(ws)
    repo = TaskRepository(ws, snapshots=True)
    repo.start()
    try:
        deadline = time.monotonic() + 10
        while snapshot_path(ws).stat().st_ino == before and time.monotonic() < deadline:
            time.sleep(0.01)  # written by the keeper's thread once ready, not at stop
        assert snapshot_path(ws).stat().st_ino != before
    finally:
        repo.stop()


def test_a_snapshot_written_after_a_full_read_is_in_list_order(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path, count=80)
    restart_index(ws)
    ids, arrangement = arrangement_on_disk(ws)
    assert list(arrangement.order) == list(range(len(arrangement.order)))  # as written
    assert [ids[at] for at in arrangement.order] == list(index_of_files(ws)._order)
    listed = [task_id for task_id, _, _ in list_task_folders(ws.root)]
    assert ids != listed  # not the listing's order


@pytest.mark.parametrize("short", ["order", "bucket", "both"])
def test_an_arrangement_that_does_not_hold_the_statuses_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, short: str
) -> None:
    ws = varied_workspace(tmp_path)
    restart_index(ws)
    store = SnapshotStore(ws.root)
    key = store.key(create=False)
    chunks = [chunk for chunk in store.load(key) if isinstance(chunk, Columns)]
    arranger = Arranger()
    for chunk in chunks:
        arranger.add(chunk.ids, chunk.statuses)
    whole = arranger.arrangement()
    order, buckets = whole.order, dict(whole.buckets)
    left_out = order[0]  # one status left out of the list order, its bucket, or both
    if short != "bucket":
        order = order[1:]
    if short != "order":
        bucket = next(key for key, positions in buckets.items() if left_out in positions)
        buckets[bucket] = array("I", [at for at in buckets[bucket] if at != left_out])
    arranged = Arrangement(order, buckets)
    store.write(key, chunks, lambda: arranged)
    with caplog.at_level(logging.WARNING, logger="runyard.repository"):
        index = restart_index(ws)
    assert "snapshot is not used" in caplog.text
    assert state_of(index) == state_of(index_of_files(ws))


def test_a_folder_renamed_while_down_is_not_taken_for_its_old_entry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Same inode, same files, so the same stamp: the listing's name decides."""
    ws = varied_workspace(tmp_path)
    restart_index(ws)
    ids, arrangement = arrangement_on_disk(ws)
    last = ids[-1]  # the entry a position past the end would wrap around to
    renamed = last.rsplit("#", 1)[0] + "#renamed"
    ws.task_dir(last).rename(ws.task_dir(renamed))
    age_all(ws)
    with caplog.at_level(logging.WARNING, logger="runyard.repository"):
        index = restart_index(ws)
    assert "snapshot is not used" not in caplog.text
    assert state_of(index) == state_of(index_of_files(ws))
    assert renamed in index.active_ids() and last not in index.active_ids()


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The collector sees again what a test froze (this process runs other tests)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize("large", [True, False])
def test_a_large_start_leaves_its_records_out_of_the_collectors_sight(
    tmp_path: Path, unfrozen: None, large: bool
) -> None:
    ws = varied_workspace(tmp_path, count=30)
    repo = TaskRepository(ws, snapshots=True)
    repo.freeze_min_folders = 30 if large else 33  # 32 folders: 30 tasks, 2 others
    repo.start()
    try:
        record = next(iter(repo._index.statuses.values()))
        assert (gc.get_freeze_count() > 0) is large
        if large:  # a record is where no collection looks
            assert not any(found is record for found in gc.get_objects())
        assert gc.isenabled()
    finally:
        repo.stop()


def test_ascending_ranks_by_instant_then_id() -> None:
    rng = random.Random(3)
    for size in (0, 1, 2, 50, 400):
        instants = [rng.randrange(max(size // 4, 1)) for _ in range(size)]  # many ties
        ids = [f"base#job#{rng.randrange(10**6)}" for _ in range(size)]
        expected = sorted(range(size), key=lambda r: (instants[r], ids[r]))
        assert ascending(instants, ids) == expected


def test_mostly_ascending_allows_one_in_a_hundred_out_of_order() -> None:
    in_order = array("I", range(1000))
    assert mostly_ascending(in_order)
    assert mostly_ascending(array("I", [*range(10, 1000), *range(10)]))  # one descent
    shuffled = list(range(1000))
    random.Random(1).shuffle(shuffled)
    assert not mostly_ascending(array("I", shuffled))


def test_folders_added_to_a_filled_index_are_where_a_fill_puts_them(tmp_path: Path) -> None:
    ws = varied_workspace(tmp_path, count=90)
    found = scan_all(list_task_folders(ws.root))
    rng = random.Random(8)
    rng.shuffle(found)
    for split in (0, 1, 45, len(found) - 1):
        index = TaskIndex()
        index.load(found[:split])
        index.add_folders(found[split:])
        assert state_of(index) == state_of(index_of_files(ws))
    assert all(status[INSTANT] >= 0 for status in index.statuses.values())
