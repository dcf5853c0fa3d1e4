"""Inputs reach in/ by reflink, by hard link only when read-only inside, else by copy."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from runyard.agents.layout import (
    RUN_DIR_MODE,
    AgentLayout,
    Ownership,
    read_final_answer,
    truncation_marker,
)
from runyard.agents.placement import place_input, reflink

# A reflink-capable folder (XFS/btrfs) to test cloning on, when the machine has one.
REFLINK_DIR = os.environ.get("RUNYARD_TEST_REFLINK_DIR", "/mnt/xfs")


def upload(folder: Path, data: bytes = b"a,b\n1,2\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "art-1-prices.csv"
    path.write_bytes(data)
    return path


def test_hard_link_only_when_read_only_inside(tmp_path: Path) -> None:
    source = upload(tmp_path / "uploads")
    owner = Ownership()
    linked = tmp_path / "run1" / "in" / "data" / "prices.csv"
    how = place_input(source, linked, read_only_inside=True, owner=owner)
    assert how in ("hardlink", "reflink")
    if how == "hardlink":
        assert linked.stat().st_ino == source.stat().st_ino
    copied = tmp_path / "run2" / "in" / "prices.csv"
    how = place_input(source, copied, read_only_inside=False, owner=owner)
    assert how in ("copy", "reflink")
    assert copied.stat().st_ino != source.stat().st_ino
    copied.write_bytes(b"changed by the run")
    assert source.read_bytes() == b"a,b\n1,2\n"


def test_created_folders_are_setgid_group_writable_never_world(tmp_path: Path) -> None:
    source = upload(tmp_path / "uploads")
    target = tmp_path / "in" / "a" / "b" / "x.csv"
    (tmp_path / "in").mkdir()
    place_input(source, target, read_only_inside=False, owner=Ownership())
    for folder in (target.parent, target.parent.parent):
        mode = stat.S_IMODE(folder.stat().st_mode)
        assert mode == RUN_DIR_MODE & 0o7777 and not mode & 0o007
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_run_folders_layout_and_modes(tmp_path: Path) -> None:
    layout = AgentLayout(tmp_path / "agent", tmp_path / "logs")
    layout.ensure()
    run_dir = layout.create_run_dirs("run-1", Ownership())
    assert sorted(p.name for p in run_dir.iterdir()) == ["in", "out", "tmp"]
    for name in ("in", "out", "tmp"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o2770
    state = layout.ensure_state_dirs("ses-1", Ownership())
    assert sorted(p.name for p in state.iterdir()) == ["checkpoint-db", "checkpoints", "tool-cache"]
    (run_dir / "tmp" / "scratch").mkdir()
    (run_dir / "tmp" / "scratch" / "f").write_text("x")
    layout.clear_tmp("run-1")
    assert list((run_dir / "tmp").iterdir()) == []


def test_socket_path_is_short(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 90) / "ws"
    path = AgentLayout(deep / "agent", tmp_path).socket_path()
    assert len(os.fsencode(path)) < 100
    assert path.parent.name.startswith("runyard-") and path.name == "api.sock"
    assert AgentLayout(Path("/ws/agent"), tmp_path).socket_path() == Path("/ws/agent/sock/api.sock")


def test_reflink_is_refused_cleanly_where_unsupported(tmp_path: Path) -> None:
    source = upload(tmp_path)
    target = tmp_path / "clone"
    if reflink(source, target):
        assert target.read_bytes() == source.read_bytes()
    else:
        assert not target.exists()


@pytest.mark.skipif(not os.path.ismount(REFLINK_DIR), reason="no reflink-capable mount")
def test_reflink_clone_is_independent_of_the_upload() -> None:
    with tempfile.TemporaryDirectory(dir=REFLINK_DIR) as folder:
        source = upload(Path(folder) / "uploads")
        target = Path(folder) / "in" / "x.csv"
        (Path(folder) / "in").mkdir()
        assert place_input(source, target, read_only_inside=True, owner=Ownership()) == "reflink"
        target.write_bytes(b"changed")
        assert source.read_bytes() == b"a,b\n1,2\n"


def test_final_answer_is_bounded_with_a_marker(tmp_path: Path) -> None:
    assert read_final_answer(tmp_path, 1024) is None
    (tmp_path / "final-answer.md").write_text("  \n")
    assert read_final_answer(tmp_path, 1024) is None
    (tmp_path / "final-answer.md").write_text("done")
    assert read_final_answer(tmp_path, 1024) == "done"
    text = "é" * 1000  # 2000 bytes; the cut may not split a character
    (tmp_path / "final-answer.md").write_text(text)
    bounded = read_final_answer(tmp_path, 1025)
    assert bounded == "é" * 512 + truncation_marker(2000, 1024)


def test_final_answer_through_a_symlink_is_ignored(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "final-answer.md").symlink_to(secret)
    assert read_final_answer(tmp_path / "out", 1024) is None
