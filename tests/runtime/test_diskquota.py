"""What the disk-quota walk counts, tried the ways a run would try to hide what it holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runyard.runtime.diskquota import MAX_DEPTH, MIB, Account, DiskQuotas, allocated_bytes


def write_mib(path: Path, mib: int) -> None:
    with open(path, "wb") as sink:
        sink.write(b"x" * (mib * MIB))
        os.fsync(sink.fileno())


def test_sparse_files_count_what_they_allocate_and_links_count_once(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    write_mib(folder / "data.bin", 3)
    with open(folder / "sparse.bin", "wb") as sparse:
        sparse.truncate(1 << 40)  # a terabyte that allocates nothing
    for i in range(5):
        os.link(folder / "data.bin", folder / f"link-{i}")
    usage = allocated_bytes([folder])
    assert 3 * MIB <= usage.bytes < 4 * MIB, usage
    assert usage.unmeasured == ""


def test_symlinks_are_not_followed_out_of_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    write_mib(outside / "big.bin", 8)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "to-dir").symlink_to(outside)
    (folder / "to-file").symlink_to(outside / "big.bin")
    assert allocated_bytes([folder]).bytes < MIB
    assert allocated_bytes([folder / "to-dir"]).bytes == 0  # a root swapped for a symlink


def test_the_same_folder_twice_and_nested_folders_count_once(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    (folder / "a" / "b").mkdir(parents=True)
    write_mib(folder / "a" / "b" / "deep.bin", 2)
    once = allocated_bytes([folder]).bytes
    assert allocated_bytes([folder, folder / "a", tmp_path / "missing"]).bytes == once


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder whatever its mode")
def test_a_folder_made_unreadable_is_over_quota_not_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    hidden = folder / "hidden"
    hidden.mkdir(parents=True)
    write_mib(hidden / "big.bin", 1)
    hidden.chmod(0)
    try:
        usage = allocated_bytes([folder])
        assert "cannot be read" in usage.unmeasured and "hidden" in usage.unmeasured
    finally:
        hidden.chmod(0o700)


def test_each_account_over_the_limit_is_reported_once(tmp_path: Path) -> None:
    big, small = tmp_path / "big", tmp_path / "small"
    big.mkdir()
    small.mkdir()
    write_mib(big / "fill.bin", 3)
    write_mib(small / "fill.bin", 1)
    accounts = [Account("run-big", [big]), Account("run-small", [small])]
    reported: list[tuple[str, str]] = []
    quotas = DiskQuotas(2 * MIB, lambda: accounts, lambda r, m: reported.append((r, m)))
    assert quotas.check() == ["run-big"]
    assert quotas.check() == []  # stopped already: not reported again while it ends
    assert len(reported) == 1 and reported[0][0] == "run-big"
    assert reported[0][1].startswith("disk quota exceeded: 3.0 MB written, limit 2 MB")


def test_folders_nested_past_the_walks_depth_are_over_quota(tmp_path: Path) -> None:
    folder = tmp_path / "tmp"
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:  # relative to a descriptor: deeper than a path could name
        for name in ["tmp"] + ["d"] * (MAX_DEPTH + 2):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    usage = allocated_bytes([folder])
    assert f"nested deeper than {MAX_DEPTH} folders" in usage.unmeasured
