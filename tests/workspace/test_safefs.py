"""Files under a folder someone else writes are opened once, never through a symlink."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from runyard.errors import NoSuchFile, UnsafePath
from runyard.workspace.safefs import open_root, open_under, walk_files


def read_all(root: Path, relative: str, **options: bool) -> bytes:
    with open_under(root, relative, **options) as opened:
        return os.pread(opened.fd, opened.size + 1, 0)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("inside")
    (root / "top.txt").write_text("top")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.txt").write_text("SECRET")
    return root


def test_reads_a_file_from_its_descriptor(tree: Path) -> None:
    with open_under(tree, "sub/a.txt") as opened:
        assert opened.name == "a.txt" and opened.size == 6
        (tree / "sub" / "a.txt").unlink()  # gone by name: the descriptor still reads it
        assert os.pread(opened.fd, 100, 0) == b"inside"
    assert opened.closed


def test_symlinks_are_never_followed(tree: Path) -> None:
    secret = tree.parent / "secret"
    (tree / "link.txt").symlink_to(secret / "key.txt")
    (tree / "inner.txt").symlink_to("top.txt")  # even one that stays inside
    (tree / "linkdir").symlink_to(secret)
    for relative in ("link.txt", "inner.txt", "linkdir/key.txt"):
        with pytest.raises(UnsafePath, match="symbolic link"):
            read_all(tree, relative)


def test_a_symlinked_root_is_refused(tree: Path) -> None:
    alias = tree.parent / "alias"
    alias.symlink_to(tree)
    with pytest.raises(UnsafePath, match="symbolic link"):
        open_root(alias)
    with pytest.raises(UnsafePath):
        read_all(alias, "top.txt")
    with pytest.raises(UnsafePath):
        walk_files(alias)
    with pytest.raises(NoSuchFile):
        walk_files(tree.parent / "missing")


def test_hard_linked_files_are_refused_when_asked(tree: Path) -> None:
    os.link(tree.parent / "secret" / "key.txt", tree / "linked.txt")
    with pytest.raises(UnsafePath, match="2 hard links"):
        read_all(tree, "linked.txt", single_link=True)
    assert read_all(tree, "linked.txt") == b"SECRET"  # uploads are linked by design
    assert "linked.txt" not in [e.relative for e in walk_files(tree, single_link=True)]


@pytest.mark.parametrize(
    "relative",
    ["", "/etc/passwd", "../secret/key.txt", "sub/../top.txt", "./top.txt", "sub//a.txt",
     "sub/", ".hidden", "sub/.hidden", "a\x00b", "a\\b", "x" * 256, "sub/" + "é" * 128,
     "a/" * 2100 + "b"],
)  # fmt: skip
def test_bad_names_are_refused_with_a_reason(tree: Path, relative: str) -> None:
    with pytest.raises(UnsafePath) as caught:
        read_all(tree, relative)
    assert caught.value.reason


def test_missing_folders_fifos_and_folders_are_not_files(tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    for relative in ("nope.txt", "top.txt/x", "nope/x", "sub", "pipe"):
        started = time.monotonic()
        with pytest.raises(NoSuchFile):
            read_all(tree, relative)
        assert time.monotonic() - started < 5  # a FIFO without a writer must not block


def test_hidden_names_only_when_asked(tree: Path) -> None:
    (tree / ".env").write_text("x=1")
    with pytest.raises(UnsafePath, match="hidden"):
        read_all(tree, ".env")
    assert read_all(tree, ".env", hidden=True) == b"x=1"


def test_listing_shows_only_what_would_be_served(tree: Path) -> None:
    secret = tree.parent / "secret"
    (tree / "link.txt").symlink_to(secret / "key.txt")
    (tree / "linkdir").symlink_to(secret)
    (tree / ".hidden").mkdir()
    (tree / ".hidden" / "x.txt").write_text("x")
    (tree / ".dot.txt").write_text("x")
    os.mkfifo(tree / "pipe")
    assert [e.relative for e in walk_files(tree)] == ["sub/a.txt", "top.txt"]
    shown = [e.relative for e in walk_files(tree, hidden=True)]
    assert shown == [".dot.txt", ".hidden/x.txt", "sub/a.txt", "top.txt"]
    assert [e.info.st_size for e in walk_files(tree)] == [6, 3]
    assert len(walk_files(tree, limit=1)) == 1


def test_a_name_swapped_for_a_symlink_while_served_never_yields_the_target(tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CONTENT")
    own = "plain-content!"
    assert len(own) == len(secret.read_text())
    stop = threading.Event()
    flipper = threading.Thread(target=_flip, args=(root, secret, own, stop))
    flipper.start()
    while not (root / "flip.txt").exists():
        time.sleep(0.001)
    outcomes = {"file": 0, "refused": 0}
    try:
        deadline = time.monotonic() + 20
        for _ in range(3000):
            if time.monotonic() > deadline:
                break
            try:
                assert read_all(root, "flip.txt") == own.encode()
                outcomes["file"] += 1
            except UnsafePath:
                outcomes["refused"] += 1
    finally:
        stop.set()
        flipper.join()
    assert outcomes["file"] and outcomes["refused"], outcomes


def _flip(root: Path, secret: Path, own: str, stop: threading.Event) -> None:
    name, regular, link = root / "flip.txt", root / ".r", root / ".l"
    while not stop.is_set():
        regular.write_text(own)
        os.replace(regular, name)
        link.symlink_to(secret)
        os.replace(link, name)
