"""Atomic record writes: temp file in the folder, fsync, os.replace; readers never see half."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from runyard.workspace.atomic import (
    dump_json,
    read_json_tolerant,
    write_bytes_atomic,
    write_bytes_new,
    write_json_atomic,
)


def test_write_creates_then_replaces_content(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    write_json_atomic(target, {"state": "queued", "note": "ünïcode"})
    assert json.loads(target.read_text("utf-8")) == {"state": "queued", "note": "ünïcode"}
    first_inode = target.stat().st_ino
    write_json_atomic(target, {"state": "running"}, sync_dir=True)
    assert json.loads(target.read_text("utf-8")) == {"state": "running"}
    assert target.stat().st_ino != first_inode
    write_json_atomic(target, {"state": "failed"}, fsync=False)
    assert read_json_tolerant(target) == {"state": "failed"}


def test_no_temp_file_is_left_behind(tmp_path: Path) -> None:
    target = tmp_path / "metadata.json"
    for n in range(20):
        write_json_atomic(target, {"n": n})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.json"]


def test_compact_utf8_json() -> None:
    assert dump_json({"a": [1, 2], "é": "ü"}) == '{"a":[1,2],"é":"ü"}'.encode()


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    write_json_atomic(target, {"state": "queued"})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": object()})
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "child").write_text("x")
    with pytest.raises(OSError):
        write_bytes_atomic(blocker, b"{}")
    assert read_json_tolerant(target) == {"state": "queued"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "status.json"]


def test_temp_files_are_hidden_and_in_the_same_folder(tmp_path: Path) -> None:
    seen: list[str] = []
    target = tmp_path / "status.json"
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.extend(os.listdir(tmp_path))

    spy = threading.Thread(target=watch)
    spy.start()
    try:
        for n in range(100):
            write_json_atomic(target, {"n": n}, fsync=False)
    finally:
        stop.set()
        spy.join()
    temps = {name for name in seen if name != "status.json"}
    assert all(name.startswith(".status.json.") and name.endswith(".tmp") for name in temps)


def test_a_reader_never_sees_half_a_record(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    versions = [
        {"version": v, "payload": str(v) * 200_000, "steps": list(range(2_000))} for v in "ab"
    ]
    write_json_atomic(target, versions[0], fsync=False)
    stop = threading.Event()
    bad: list[object] = []
    reads = 0

    def hammer() -> None:
        nonlocal reads
        while not stop.is_set():
            got = read_json_tolerant(target)
            reads += 1
            if got not in versions:
                bad.append(got if got is None else got.get("version"))

    reader = threading.Thread(target=hammer)
    reader.start()
    try:
        for n in range(100):
            write_json_atomic(target, versions[n % 2], fsync=False)
    finally:
        stop.set()
        reader.join()
    assert reads > 0
    assert bad == []


def test_a_new_file_is_written_in_place_and_never_over_another(tmp_path: Path) -> None:
    """``write_bytes_new`` (files of a staging folder) creates; it never replaces a file,
    never follows a symlink planted at the name, and a failed write leaves nothing."""
    target = tmp_path / "status.json"
    write_bytes_new(target, b'{"state":"queued"}')
    assert target.read_bytes() == b'{"state":"queued"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp file

    with pytest.raises(FileExistsError):
        write_bytes_new(target, b"other")
    assert target.read_bytes() == b'{"state":"queued"}'

    outside = tmp_path / "outside"
    outside.write_bytes(b"kept")
    planted = tmp_path / "planted.json"
    planted.symlink_to(outside)
    with pytest.raises(FileExistsError):
        write_bytes_new(planted, b"through the link")
    assert outside.read_bytes() == b"kept"

    failing = tmp_path / "metadata.json"
    with pytest.raises(TypeError):
        write_bytes_new(failing, 12345)  # type: ignore[arg-type]  # fails once the file is made
    assert not failing.exists()
