"""Atomic record writes: temp file in the folder, fsync, os.replace; readers never see half."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runyard.workspace.atomic import (
    ONE_READ_MAX,
    dump_json,
    read_bytes_tolerant,
    read_json_tolerant,
    read_whole,
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


def test_a_tolerant_read_takes_regular_files_only(tmp_path: Path) -> None:
    (tmp_path / "record.json").write_bytes(b'{"state": "queued"}')
    (tmp_path / "link.json").symlink_to(tmp_path / "record.json")
    os.mkfifo(tmp_path / "fifo.json")  # opening it must not block
    (tmp_path / "folder.json").mkdir()
    assert read_bytes_tolerant(tmp_path / "record.json") == b'{"state": "queued"}'
    assert read_bytes_tolerant(str(tmp_path / "record.json")) == b'{"state": "queued"}'
    for name in ("link.json", "fifo.json", "folder.json", "missing.json"):
        assert read_bytes_tolerant(tmp_path / name) is None, name
    (tmp_path / "empty.json").write_bytes(b"")
    assert read_bytes_tolerant(tmp_path / "empty.json") == b""
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:  # relative to a folder's descriptor, and refused past a limit
        assert read_bytes_tolerant("record.json", dir_fd=folder) == b'{"state": "queued"}'
        assert read_bytes_tolerant("link.json", dir_fd=folder) is None
        assert read_bytes_tolerant("record.json", dir_fd=folder, limit=19) == b'{"state": "queued"}'
        assert read_bytes_tolerant("record.json", dir_fd=folder, limit=18) is None
    finally:
        os.close(folder)


def test_a_file_longer_than_its_stat_said_is_read_whole_up_to_the_limit(tmp_path: Path) -> None:
    data = os.urandom(200_000)  # several chunks past the size given
    (tmp_path / "grown").write_bytes(data)
    fd = os.open(tmp_path / "grown", os.O_RDONLY)
    try:
        assert read_whole(fd, 10) == data  # a file that grew after its fstat
        os.lseek(fd, 0, os.SEEK_SET)
        assert read_whole(fd, 10, limit=150_000) is None
        os.lseek(fd, 0, os.SEEK_SET)
        assert read_whole(fd, len(data), limit=len(data)) == data
        os.lseek(fd, 0, os.SEEK_SET)  # a size too big to ask of one read: read to the end
        assert read_whole(fd, ONE_READ_MAX) == data
    finally:
        os.close(fd)


@pytest.mark.strace
def test_a_tolerant_read_is_open_fstat_read_close(tmp_path: Path) -> None:
    """A record read on a busy server's threads gives the interpreter lock away at each
    call: four, where a file object takes ten."""
    (tmp_path / "status.json").write_bytes(b'{"state": "running"}' * 20)
    script = (
        "import os, sys; from runyard.workspace.atomic import read_bytes_tolerant;"
        "os.getppid(); read_bytes_tolerant(sys.argv[1]); os.getppid()"
    )
    trace = tmp_path / "trace"
    argv = ["strace", "-e", "trace=all", "-o", str(trace), sys.executable, "-c", script]
    traced = subprocess.run(
        [*argv, str(tmp_path / "status.json")], capture_output=True, text=True, timeout=60
    )
    assert traced.returncode == 0, traced.stderr
    lines = trace.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("getppid(")]
    assert len(marks) == 2, lines[-20:]
    calls = [line.split("(", 1)[0] for line in lines[marks[0] + 1 : marks[1]]]
    assert calls in (
        ["openat", "fstat", "read", "close"],
        ["openat", "newfstatat", "read", "close"],
    )
