"""Log windows (TaskLogChunk): byte offsets, tail and head, reset, UTF-8 safety, O(window)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runyard.workspace import TaskLogChunk, read_log_window

FIELDS = {
    "content",
    "start_offset",
    "next_offset",
    "file_size",
    "has_more_before",
    "has_more_after",
    "reset",
}


def write_log(tmp_path: Path, text: str) -> tuple[Path, bytes]:
    path = tmp_path / "run.log"
    data = text.encode("utf-8")
    path.write_bytes(data)
    return path, data


def check_window(data: bytes, chunk: TaskLogChunk, limit: int) -> None:
    """The window is exactly the bytes it names, whole characters, within the limit."""
    window = data[chunk.start_offset : chunk.next_offset]
    assert window.decode("utf-8") == chunk.content
    assert len(window) <= limit
    for edge in (chunk.start_offset, chunk.next_offset):
        assert edge == len(data) or data[edge] & 0xC0 != 0x80
    assert chunk.file_size == len(data)
    assert chunk.has_more_before == (chunk.start_offset > 0)
    assert chunk.has_more_after == (chunk.next_offset < len(data))


def test_the_chunk_has_the_protocol_fields(tmp_path: Path) -> None:
    path, _ = write_log(tmp_path, "Demo result=3\n")
    chunk = read_log_window(path)
    assert set(chunk.model_dump()) == FIELDS
    assert chunk.model_dump() == {
        "content": "Demo result=3\n",
        "start_offset": 0,
        "next_offset": 14,
        "file_size": 14,
        "has_more_before": False,
        "has_more_after": False,
        "reset": False,
    }


def test_tail_head_and_middle(tmp_path: Path) -> None:
    path, data = write_log(tmp_path, "".join(f"line {n:04d}\n" for n in range(1000)))
    tail = read_log_window(path, -1, 1024)
    assert tail.next_offset == len(data) and tail.start_offset == len(data) - 1024
    assert tail.has_more_before and not tail.has_more_after and not tail.reset
    head = read_log_window(path, 0, 1024)
    assert head.content == data[:1024].decode() and head.has_more_after
    middle = read_log_window(path, 5000, 100)
    assert (middle.start_offset, middle.next_offset) == (5000, 5100)
    for chunk, limit in ((tail, 1024), (head, 1024), (middle, 100)):
        check_window(data, chunk, limit)


def test_offset_past_the_end_resets_to_the_tail(tmp_path: Path) -> None:
    path, data = write_log(tmp_path, "x" * 5000)
    chunk = read_log_window(path, len(data) + 1, 1024)
    assert chunk.reset
    assert (chunk.start_offset, chunk.next_offset) == (len(data) - 1024, len(data))
    at_end = read_log_window(path, len(data), 1024)
    assert not at_end.reset and at_end.content == "" and at_end.next_offset == len(data)
    assert at_end.has_more_before and not at_end.has_more_after


def test_missing_unset_and_special_logs_are_empty(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.log")
    for path in [None, "", tmp_path / "missing.log", tmp_path, tmp_path / "fifo.log"]:
        chunk = read_log_window(path, 0, 1024)
        assert (chunk.content, chunk.file_size, chunk.next_offset) == ("", 0, 0)
    assert read_log_window(tmp_path / "missing.log", 10, 1024).reset


@pytest.mark.parametrize("char", ["é", "€", "😀"], ids=["2-byte", "3-byte", "4-byte"])
def test_windows_never_split_a_character_at_either_end(tmp_path: Path, char: str) -> None:
    path, data = write_log(tmp_path, "ab" + char * 7 + "c" + char + "\n" + char * 3)
    for limit in range(1, 12):
        for offset in range(-1, len(data) + 1):
            chunk = read_log_window(path, offset, limit)
            check_window(data, chunk, limit)
            assert "\ufffd" not in chunk.content
            if offset >= 0:
                assert offset <= chunk.start_offset < offset + 4


@pytest.mark.parametrize("char", ["é", "€", "😀"], ids=["2-byte", "3-byte", "4-byte"])
@pytest.mark.parametrize("limit", [4, 5, 7, 64, 1024])
def test_following_next_offset_reassembles_the_file(tmp_path: Path, char: str, limit: int) -> None:
    text = "".join(f"{n} {char * (n % 5)} ok\n" for n in range(300))
    path, _ = write_log(tmp_path, text)
    parts, offset = [], 0
    while True:
        chunk = read_log_window(path, offset, limit)
        parts.append(chunk.content)
        if not chunk.has_more_after:
            break
        assert chunk.next_offset > offset
        offset = chunk.next_offset
    assert "".join(parts) == text


def bytes_read_by_this_process() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_100_mb_log_is_read_by_window_only(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    size = 100 * 1024 * 1024
    with open(path, "wb") as fh:
        fh.write(("héllo wörld " * 1000).encode())
        fh.truncate(size - 10_000)
        fh.seek(0, os.SEEK_END)
        fh.write(("€ end line\n" * 800).encode())
    size = path.stat().st_size
    calibration = bytes_read_by_this_process()
    overhead = bytes_read_by_this_process() - calibration
    for offset in (-1, 0, size // 2 + 1, size + 5):
        before = bytes_read_by_this_process()
        chunk = read_log_window(path, offset, 65536)
        read = bytes_read_by_this_process() - before - overhead
        assert read <= 65536 + 3, (offset, read)  # the window and a character's tail
        assert chunk.file_size == size
        assert len(chunk.content.encode()) <= 65536
    assert read_log_window(path, -1, 65536).content.endswith("€ end line\n")
