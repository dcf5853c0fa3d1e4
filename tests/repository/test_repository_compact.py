"""The index's compact form: shared values, order-free children, answers as they were."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from repo_helpers import at, make_workspace, put_metadata, put_status

from runyard.repository import TaskRepository
from runyard.repository.index import TaskIndex
from runyard.repository.records import (
    CREATED_AT,
    INSTANT,
    META_CREATED_AT,
    META_INSTANT,
    META_PARENTS,
    PARENTS,
    STATE,
    StatusRecord,
    list_task_folders,
    parse_status,
    sort_instant,
    status_json,
    wire_bytes,
)
from runyard.repository.scan import scan_all
from runyard.workspace import TaskStatus, Workspace
from runyard.workspace.atomic import write_json_atomic

UPSTREAM = "base#job#up1,base#job#up2"


def lineage_workspace(tmp_path: Path) -> Workspace:
    ws = make_workspace(tmp_path)
    put_status(ws, "base#job#up1", created=1)
    put_status(ws, "base#job#up2", created=2)
    for i in range(6):
        task_id = f"train#fit#c{i}"
        put_status(ws, task_id, created=10 + i, sources=UPSTREAM)
        put_metadata(ws, task_id, created=10 + i, sources=UPSTREAM)
    return ws


def assert_metadata_shares_status_values(index: TaskIndex, task_id: str) -> None:
    """Equal values: the status record stands for the metadata record too."""
    status, meta = index.statuses[task_id], index.metadata[task_id]
    assert meta is status
    assert (meta[META_INSTANT], meta[META_CREATED_AT], meta[META_PARENTS]) == (
        status[INSTANT],
        status[CREATED_AT],
        status[PARENTS],
    )


def test_metadata_holds_the_status_objects_when_equal(tmp_path: Path) -> None:
    ws = lineage_workspace(tmp_path)
    index = TaskIndex()
    index.load(scan_all(list_task_folders(ws.root)))
    for i in range(6):
        assert_metadata_shares_status_values(index, f"train#fit#c{i}")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    put_metadata(ws, "train#fit#c0", created=10, sources="base#job#up2,base#job#up1")
    put_status(ws, "train#fit#c0", created=10, sources="base#job#up2,base#job#up1")
    repo.refresh("train#fit#c0")
    assert_metadata_shares_status_values(repo._index, "train#fit#c0")
    nodes = {node.task_id: node for node in repo.graph("train#fit#c0").nodes}
    assert nodes["train#fit#c0"].parent_ids == ["base#job#up2", "base#job#up1"]


def test_metadata_different_from_the_status_keeps_its_own_values(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "train#fit#odd", created=5, sources="base#job#up1")
    put_metadata(ws, "train#fit#odd", created=7, sources="base#job#up2")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    node = next(n for n in repo.graph("train#fit#odd").nodes if n.task_id == "train#fit#odd")
    assert node.parent_ids == ["base#job#up2"]
    assert node.created_at == at(7) and not node.provisional


def test_children_do_not_depend_on_the_order_tasks_arrive(tmp_path: Path) -> None:
    ws = lineage_workspace(tmp_path)
    scanned = scan_all(list_task_folders(ws.root))
    loaded, forward, backward = TaskIndex(), TaskIndex(), TaskIndex()
    loaded.load(scanned)
    for task_id, found in scanned:
        forward.apply_folder(task_id, found)
    for task_id, found in reversed(scanned):
        backward.apply_folder(task_id, found)
    children = tuple(f"train#fit#c{i}" for i in range(6))
    assert loaded.children == {"base#job#up1": children, "base#job#up2": children}
    assert forward.children == loaded.children == backward.children
    backward.apply("train#fit#c3", status=None, metadata=None, exists=False)
    assert backward.children["base#job#up1"] == children[:3] + children[4:]


def test_a_parent_losing_its_last_child_leaves_the_children(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "etl#load#only", created=1, sources="base#job#up1")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    assert repo._index.children == {"base#job#up1": ("etl#load#only",)}
    put_status(ws, "etl#load#only", created=1)
    repo.refresh("etl#load#only")
    assert repo._index.children == {}


def test_list_results_reads_the_metadata_files(tmp_path: Path) -> None:
    ws = lineage_workspace(tmp_path)
    repo = TaskRepository(ws)
    repo.start(watch=False)
    meta = repo.get_metadata("train#fit#c2")
    assert meta is not None
    meta.output_params = {"value": 42}
    write_json_atomic(ws.metadata_path("train#fit#c2"), meta.to_json(), fsync=False)
    ws.metadata_path("train#fit#c4").write_text("{broken")
    results = repo.list_results()
    assert [m.task_id for m in results] == [f"train#fit#c{i}" for i in (5, 3, 2, 1, 0)]
    assert results[2].output_params == {"value": 42}
    assert "train#fit#c4" not in repo._index.metadata


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"synced_from": None, "limits": None, "submitted_by": None},
        {"synced_from": {"server": "http://other", "run_id": "r1"}},
        {"limits": {"max_runtime_s": 5}, "submitted_by": {"session_id": "s1"}},
        {"submitted_by": "cli", "label": None},
    ],
)
def test_the_kept_bytes_are_the_answer_of_status(extra: dict[str, object]) -> None:
    status = TaskStatus.model_validate(
        {
            "task_id": "base#demo#one",
            "run_id": "r1",
            "task_type": "base",
            "task_name": "demo",
            "state": "succeeded",
            "created_at": "2026-01-01T00:00:00Z",
            **extra,
        }
    )
    assert json.loads(wire_bytes(status)) == status.to_json()
    parsed = parse_status(json.dumps(status.to_json()).encode(), "base#demo#one")
    assert parsed is not None and json.loads(status_json(parsed[0]) or b"") == status.to_json()


def status_record(task_id: str, instant: int, state: str) -> StatusRecord:
    return (instant, f"t{instant}", (), b"{}", state)


def test_buckets_of_ids_stay_in_order_through_random_changes() -> None:
    """Adds, replacements (same bucket, other bucket, other instant) and removals, checked
    against a plain sort after each step: every listing, page by page and at once."""
    rng = random.Random(11)
    index, truth = TaskIndex(), {}
    ids = [f"{kind}#job#n{i}" for i in range(60) for kind in ("base", "etl")]
    states = ["queued", "running", "succeeded", "failed"]
    buckets = [(kind, state) for kind in ("base", "etl") for state in states]
    for step in range(400):
        task_id = rng.choice(ids)
        if step % 7 == 3:
            index.apply(task_id, status=None, exists=False)
            truth.pop(task_id, None)
        else:
            record = status_record(task_id, rng.randrange(25), rng.choice(states))
            index.apply(task_id, status=record, exists=True)
            truth[task_id] = record
        expected = sorted(truth, key=lambda t: (truth[t][INSTANT], t), reverse=True)
        assert index.ids(buckets) == expected
        paged, after = [], None
        while True:
            page, after = index.page(buckets, after, 9)
            paged += [task_id for task_id, _ in page]
            if after is None:
                break
        assert paged == expected
        running = [(kind, "running") for kind in ("base", "etl")]
        assert index.ids(running) == [t for t in expected if truth[t][4] == "running"]


def test_a_status_that_stood_for_the_metadata_leaves_it_its_values(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "train#fit#one", created=5, sources="base#job#up1")
    put_metadata(ws, "train#fit#one", created=5, sources="base#job#up1")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    index = repo._index
    assert_metadata_shares_status_values(index, "train#fit#one")
    put_status(ws, "train#fit#one", "running", created=9, sources="base#job#up2")
    repo.get("train#fit#one")  # the status alone is read again
    meta = index.metadata["train#fit#one"]
    # its own three values now: the replaced status (its packed bytes) is not kept for them
    assert meta == (sort_instant(at(5)), None, ("base#job#up1",))
    node = next(n for n in repo.graph("train#fit#one").nodes if n.task_id == "train#fit#one")
    assert (node.created_at, node.parent_ids, node.state) == (at(5), ["base#job#up1"], "running")
    assert index.children == {"base#job#up1": ("train#fit#one",)}
    ws.status_path("train#fit#one").write_text("{broken")
    repo.refresh("train#fit#one")
    assert "train#fit#one" not in index.statuses
    node = next(n for n in repo.graph("train#fit#one").nodes if n.task_id == "train#fit#one")
    assert (node.created_at, node.parent_ids, node.state) == (at(5), ["base#job#up1"], "succeeded")


def test_long_listings_below_a_cursor_follow_the_order() -> None:
    """Past MERGE_LIMIT a listing is a slice of the whole order (every bucket) or one sort
    (some buckets): both match a plain sort, below any position."""
    rng = random.Random(5)
    index, truth = TaskIndex(), {}
    states = ["queued", "running", "succeeded", "failed"]
    for i in range(3000):
        task_id = f"{rng.choice(['base', 'etl'])}#job#n{i}"
        record = status_record(task_id, rng.randrange(400), rng.choice(states))
        index.apply(task_id, status=record, exists=True)
        truth[task_id] = record
    everything = [(kind, state) for kind in ("base", "etl") for state in states]
    some = [("etl", "succeeded"), ("base", "failed"), ("base", "running")]
    for buckets in (everything, some):
        selected = [t for t in truth if (t.split("#")[0], truth[t][STATE]) in buckets]
        expected = sorted(selected, key=lambda t: (truth[t][INSTANT], t), reverse=True)
        assert index.ids(buckets) == expected
        for cut in (0, 1, 777, len(expected) // 2, len(expected) - 1):
            after = (truth[expected[cut]][INSTANT], expected[cut])
            for limit in (1200, None):
                page, last = index.page(buckets, after, limit)
                below = expected[cut + 1 :]
                assert [task_id for task_id, _ in page] == below[:limit]
                more = limit is not None and len(below) > limit
                assert last == (
                    (truth[below[limit - 1]][INSTANT], below[limit - 1]) if more else None
                )


def test_the_listing_is_every_real_task_folder_with_its_path_and_inode(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    for task_id in ("base#job#a", "base#job#b", "etl#load#c", "train#fit#d"):
        put_status(ws, task_id)
    (ws.root / "base" / "base#job#file").write_text("not a folder")
    (ws.root / "base" / "not an id").mkdir()
    (ws.root / "etl" / "base#job#elsewhere").mkdir()  # an id of another type
    (ws.root / "etl" / "etl#load#link").symlink_to(ws.root / "etl" / "etl#load#c")
    expected = [
        (entry.name, entry.path, entry.inode())
        for task_type in sorted(os.listdir(ws.root))
        if (ws.root / task_type).is_dir()
        for entry in os.scandir(ws.root / task_type)
        if entry.name.startswith(task_type + "#")
        and "#" in entry.name[len(task_type) + 1 :]
        and entry.is_dir(follow_symlinks=False)
    ]
    names = ["base#job#a", "base#job#b", "etl#load#c", "train#fit#d"]
    assert sorted(name for name, _, _ in expected) == names
    assert list_task_folders(ws.root) == expected
    known = list_task_folders(ws.root, known={"not an id"}, types=["base"])
    assert sorted(name for name, _, _ in known) == ["base#job#a", "base#job#b", "not an id"]
    assert all(path == f"{ws.root}/base/{name}" for name, path, _ in known)


def test_a_status_read_again_is_its_file_whether_or_not_the_index_has_its_bytes(
    tmp_path: Path,
) -> None:
    """``get`` takes a file whose bytes are the index's answer bytes as the indexed record;
    a file changed in place to bytes of the same size, and one whose bytes were never the
    answer bytes (written by hand, indented), are read as they are."""
    ws = make_workspace(tmp_path)
    put_status(ws, "base#job#same", state="succeeded", error="")
    indented(ws, put_status(ws, "base#job#odd", error="é"))
    repo = TaskRepository(ws)
    repo.start(watch=False)
    same = repo.get("base#job#same")
    assert same is not None and same.state == "succeeded"
    assert ws.status_path("base#job#same").read_bytes() == status_json(
        repo._index.statuses["base#job#same"]
    )
    before = ws.status_path("base#job#same").stat().st_size
    put_status(ws, "base#job#same", state="cancelled", error="")  # as long as "succeeded"
    assert ws.status_path("base#job#same").stat().st_size == before
    changed = repo.get("base#job#same")
    assert changed is not None and changed.state == "cancelled"
    assert repo._index.statuses["base#job#same"][STATE] == "cancelled"
    assert [s.state for s in repo.list_statuses(state="cancelled")[0]] == ["cancelled"]
    odd = repo.get("base#job#odd")
    assert odd is not None and odd.error == "é"
    assert ws.status_path("base#job#odd").read_bytes() != status_json(
        repo._index.statuses["base#job#odd"]
    )
    indented(ws, put_status(ws, "base#job#odd", error="è"))
    again = repo.get("base#job#odd")
    assert again is not None and again.error == "è"
    assert json.loads(status_json(repo._index.statuses["base#job#odd"]) or b"")["error"] == "è"


def indented(ws: Workspace, status: TaskStatus) -> None:
    ws.status_path(status.task_id).write_text(json.dumps(status.to_json(), indent=1))


def test_a_folder_read_again_with_its_status_unchanged_still_takes_a_new_metadata(
    tmp_path: Path,
) -> None:
    """``refresh`` keeps the indexed status record when the file holds its answer bytes,
    and still reads the metadata: its lineage, and a status changed after it, are seen."""
    ws = make_workspace(tmp_path)
    put_status(ws, "base#job#up1", created=1)
    put_status(ws, "base#job#up2", created=2)
    put_status(ws, "train#fit#kid", created=3, sources="base#job#up1")
    put_metadata(ws, "train#fit#kid", created=3, sources="base#job#up1")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    kept = repo._index.statuses["train#fit#kid"]
    assert repo.graph("base#job#up1").nodes[-1].task_id == "train#fit#kid"
    put_metadata(ws, "train#fit#kid", created=3, sources="base#job#up2")
    repo.refresh("train#fit#kid")
    assert repo._index.statuses["train#fit#kid"] is kept  # the same bytes: the same record
    assert repo._index.metadata["train#fit#kid"][META_PARENTS] == ("base#job#up2",)
    assert [n.task_id for n in repo.graph("base#job#up2").nodes] == [
        "base#job#up2",
        "train#fit#kid",
    ]
    assert [n.task_id for n in repo.graph("base#job#up1").nodes] == ["base#job#up1"]
    ws.metadata_path("train#fit#kid").unlink()
    repo.refresh("train#fit#kid")
    assert "train#fit#kid" not in repo._index.metadata
    put_status(ws, "train#fit#kid", state="cancelled", created=3, sources="base#job#up1")
    repo.refresh("train#fit#kid")
    assert repo._index.statuses["train#fit#kid"][STATE] == "cancelled"
