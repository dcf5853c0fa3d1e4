"""The Linux watch feed: only the events a record change makes, and the folders it follows."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

if sys.platform != "linux":  # pragma: no cover - the feed is Linux's
    pytest.skip("inotify is Linux's", allow_module_level=True)

from inotify_simple import INotify, flags  # noqa: E402

from runyard.repository.inotify import ADDED, DELETED, MODIFIED, _Watches, inotify_feed  # noqa: E402

Batch = AbstractSet[tuple[int, str]]
TASK = "base#demo#one"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    task = tmp_path / "base" / TASK
    task.mkdir(parents=True)
    (task / "status.json").write_text('{"state": "queued"}')
    (task / "events.jsonl").write_text('{"kind": "state"}\n')
    return tmp_path


@pytest.fixture
def feed(tree: Path) -> Iterator[Callable[..., Generator[Batch, None, None]]]:
    stop = threading.Event()
    made: list[Generator[Batch, None, None]] = []

    def start(
        *, recursive: bool = True, task_dirs: tuple[str, ...] = (),
        names: frozenset[str] | None = None,
    ) -> Generator[Batch]:  # fmt: skip
        gen = inotify_feed(
            [str(tree / "base")], list(task_dirs), recursive=recursive, stop=stop,
            debounce_ms=15, step_ms=3, wait_ms=10, names=names,
        )  # fmt: skip
        assert next(gen) == set()  # the watches are placed
        made.append(gen)
        return gen

    yield start
    stop.set()
    for gen in made:
        gen.close()


def collect(gen: Generator[Batch, None, None], seconds: float) -> set[tuple[int, str]]:
    """Everything the feed hands over in ``seconds``."""
    seen: set[tuple[int, str]] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen |= next(gen)
    return seen


def until(gen: Generator[Batch, None, None], wanted: tuple[int, str], seconds: float = 5.0) -> set:
    seen: set[tuple[int, str]] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and wanted not in seen:
        seen |= next(gen)
    assert wanted in seen, f"{wanted} never came; saw {sorted(seen)}"
    return seen


def replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_reading_records_makes_no_event_and_an_appended_line_does(tree: Path, feed) -> None:
    gen = feed()
    task = tree / "base" / TASK
    for _ in range(20):  # what the server does to answer and to index: open, read, close
        (task / "status.json").read_bytes()
        (task / "events.jsonl").read_bytes()
        os.stat(task / "status.json")
    assert collect(gen, 0.3) == set()
    with (task / "events.jsonl").open("a") as events:  # a worker's progress line
        events.write('{"kind": "progress"}\n')
    until(gen, (MODIFIED, str(task / "events.jsonl")))


def test_an_atomic_replace_shows_as_its_rename(tree: Path, feed) -> None:
    gen = feed()
    status = tree / "base" / TASK / "status.json"
    replace(status, '{"state": "running"}')
    seen = until(gen, (ADDED, str(status)))
    # the temporary file's creation and its writes are not asked for: only its close
    assert (ADDED, str(status.with_name(".status.json.tmp"))) not in seen


def test_only_the_names_asked_for_make_a_batch_in_a_task_folder(tree: Path, feed) -> None:
    gen = feed(names=frozenset({"status.json", "events.jsonl"}))
    task = tree / "base" / TASK
    (task / ".worker.lock").write_text("123 456 run\n")  # closed after writing: not asked for
    (task / ".scratch.tmp").write_text("x")
    os.replace(task / ".scratch.tmp", task / "notes.txt")
    assert collect(gen, 0.3) == set()
    replace(task / "status.json", '{"state": "running"}')  # its temporary file is left out
    seen = until(gen, (ADDED, str(task / "status.json")))
    assert {path for _, path in seen} == {str(task / "status.json")}
    fresh = tree / "base" / "base#demo#two"
    fresh.mkdir()  # in a type folder every name counts
    until(gen, (ADDED, str(fresh)))


def test_a_folder_that_arrives_is_watched_before_its_batch_is_handed_over(
    tree: Path, feed
) -> None:
    gen = feed()
    staged = tree / ".staging" / "base#demo#two"
    staged.mkdir(parents=True)
    (staged / "status.json").write_text('{"state": "queued"}')
    arrived = tree / "base" / "base#demo#two"
    os.rename(staged, arrived)
    until(gen, (ADDED, str(arrived)))
    replace(arrived / "status.json", '{"state": "running"}')  # right after: no gap
    until(gen, (ADDED, str(arrived / "status.json")))


def test_a_link_posing_as_a_task_folder_is_never_followed(tree: Path, feed) -> None:
    outside = tree / "elsewhere"  # what a link in a type folder may point at: not the index's
    outside.mkdir()
    (tree / "base" / "base#demo#early").symlink_to(outside)  # there before the watches
    gen = feed()
    late = tree / "base" / "base#demo#late"
    late.symlink_to(outside, target_is_directory=True)  # and one made after
    until(gen, (ADDED, str(late)))  # a name in its type folder, as any
    (outside / "status.json").write_text('{"state": "succeeded"}')
    replace(outside / "status.json", '{"state": "failed"}')
    assert collect(gen, 0.3) == set()  # nothing through either link


def test_a_folder_moved_away_is_reported_and_no_longer_followed(tree: Path, feed) -> None:
    gen = feed()
    task = tree / "base" / TASK
    away = tree / "aside"
    os.rename(task, away)
    until(gen, (DELETED, str(task)))
    replace(away / "status.json", '{"state": "succeeded"}')
    (away / "status.json").write_text("{}")  # a write in place, closed: a CLOSE_WRITE
    assert collect(gen, 0.3) == set()  # nothing under the path it had


def test_a_removed_folder_is_reported(tree: Path, feed) -> None:
    gen = feed()
    task = tree / "base" / TASK
    for name in os.listdir(task):
        os.unlink(task / name)
    os.rmdir(task)
    until(gen, (DELETED, str(task)))


def test_nothing_below_a_task_folder_is_watched(tree: Path, feed) -> None:
    task = tree / "base" / TASK
    (task / "artifacts").mkdir()
    gen = feed()
    (task / "artifacts" / "model.bin").write_bytes(b"x" * 100)
    (task / "artifacts" / "deeper").mkdir()
    assert collect(gen, 0.3) == set()


def test_without_recursion_only_the_folders_named_are_followed(tree: Path, feed) -> None:
    gen = feed(recursive=False)
    task = tree / "base" / TASK
    replace(task / "status.json", '{"state": "running"}')
    assert collect(gen, 0.3) == set()  # not named: not followed
    gen = feed(recursive=False, task_dirs=(str(task),))
    replace(task / "status.json", '{"state": "succeeded"}')
    until(gen, (ADDED, str(task / "status.json")))
    fresh = tree / "base" / "base#demo#three"
    fresh.mkdir()
    until(gen, (ADDED, str(fresh)))  # seen in its type folder, then not followed
    (fresh / "status.json").write_text("{}")
    assert collect(gen, 0.3) == set()


def overflowed() -> object:
    """What the kernel queues when its queue is full: wd -1, ``IN_Q_OVERFLOW``."""
    return type("Event", (), {"wd": -1, "mask": flags.Q_OVERFLOW, "cookie": 0, "name": ""})()


def test_an_overflow_has_the_folders_that_may_have_changed_read_again(tree: Path) -> None:
    base = tree / "base"
    (base / "base#demo#old").mkdir()
    os.utime(base / "base#demo#old", (time.time() - 3600, time.time() - 3600))
    (base / "base#demo#gone").mkdir()
    watches = _Watches(INotify(), recursive=True)
    try:
        watches.add_type(str(base))
        os.utime(base / TASK, (time.time() - 3600, time.time() - 3600))
        watches.read(0)  # the last read before the events that will be lost
        late = base / "base#demo#late"
        late.mkdir()  # made while the queue overflowed: its event was among those lost
        replace(base / TASK / "status.json", '{"state": "running"}')  # its folder's time moves
        os.rmdir(base / "base#demo#gone")
        watches.read(0)
        batch: set[tuple[int, str]] = set()
        watches.take([overflowed()], batch)
        watches.rescan_if_due(batch)
        assert batch == {
            (MODIFIED, str(base / TASK)),
            (MODIFIED, str(late)),
            (DELETED, str(base / "base#demo#gone")),
        }  # not the old folder, unchanged since long before
        assert str(late) in watches.by_path  # followed from now on
        assert str(base / "base#demo#gone") not in watches.by_path
        # another overflow at once waits for the spacing: a loop of writes that overflows
        # the queue on purpose costs a listing every RESCAN_SPACING seconds, no more
        again: set[tuple[int, str]] = set()
        watches.take([overflowed()], again)
        watches.rescan_if_due(again)
        assert again == set()
        watches.next_rescan = 0.0  # the spacing has passed
        watches.rescan_if_due(again)
        assert (MODIFIED, str(late)) in again
    finally:
        watches.inotify.close()


def test_a_missing_folder_fails_the_start_and_stop_ends_the_feed(tmp_path: Path) -> None:
    stop = threading.Event()
    missing = inotify_feed(
        [str(tmp_path / "gone")], [], recursive=True, stop=stop,
        debounce_ms=15, step_ms=3, wait_ms=10,
    )  # fmt: skip
    with pytest.raises(FileNotFoundError):
        next(missing)
    (tmp_path / "base").mkdir()
    gen = inotify_feed(
        [str(tmp_path / "base")], [], recursive=True, stop=stop,
        debounce_ms=15, step_ms=3, wait_ms=10,
    )  # fmt: skip
    assert next(gen) == set()
    stop.set()
    began = time.monotonic()
    assert next(gen, None) is None
    assert time.monotonic() - began < 1.0
