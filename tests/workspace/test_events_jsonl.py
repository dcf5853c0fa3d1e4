"""events.jsonl: one JSON object a line, appended, replayable from any byte offset."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from runyard.workspace.events import append_event, read_events


def test_append_then_read_from_offsets(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = {"kind": "progress", "name": "load", "percentage": 10.0}
    second = {"kind": "state", "state": "running", "at": "2026-01-01T00:00:00Z", "note": "é"}
    append_event(path, first)
    append_event(path, second)
    events, next_offset = read_events(path)
    assert [event for _, event in events] == [first, second]
    assert events[0][0] == 0 and events[1][0] == len(path.read_bytes().splitlines()[0]) + 1
    assert next_offset == path.stat().st_size
    assert read_events(path, events[1][0]) == ([events[1]], next_offset)
    assert read_events(path, next_offset) == ([], next_offset)
    append_event(path, {"kind": "progress", "percentage": 20.0})
    later, end = read_events(path, next_offset)
    assert [event["percentage"] for _, event in later] == [20.0]
    assert end == path.stat().st_size


def test_each_event_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append_event(path, {"kind": "log", "text": "two\nlines"})
    assert path.read_bytes().count(b"\n") == 1
    assert read_events(path)[0][0][1]["text"] == "two\nlines"


def test_a_partial_last_line_is_not_returned_yet(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append_event(path, {"kind": "progress", "percentage": 1})
    complete = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "progress", "perc')
    events, next_offset = read_events(path)
    assert len(events) == 1 and next_offset == complete
    with open(path, "ab") as fh:
        fh.write(b'entage": 2}\n')
    events, next_offset = read_events(path, next_offset)
    assert [e["percentage"] for _, e in events] == [2]
    assert next_offset == path.stat().st_size


def test_invalid_and_non_object_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'not json\n[1, 2]\n"text"\n{"kind": "future-kind", "x": 1}\n\n')
    events, next_offset = read_events(path)
    assert [event for _, event in events] == [{"kind": "future-kind", "x": 1}]
    assert next_offset == path.stat().st_size


def test_missing_symlinked_and_special_files_read_as_empty(tmp_path: Path) -> None:
    assert read_events(tmp_path / "missing.jsonl", 7) == ([], 7)
    real = tmp_path / "real.jsonl"
    append_event(real, {"kind": "progress"})
    os.symlink(real, tmp_path / "link.jsonl")
    assert read_events(tmp_path / "link.jsonl") == ([], 0)
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert read_events(tmp_path / "fifo.jsonl") == ([], 0)


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"

    def writer(n: int) -> None:
        for i in range(200):
            append_event(path, {"kind": "progress", "writer": n, "i": i, "pad": "x" * 500})

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 800
    events = [json.loads(line) for line in lines]
    for n in range(4):
        assert [e["i"] for e in events if e["writer"] == n] == list(range(200))
