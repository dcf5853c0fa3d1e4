"""The workspace's modes: what ``tighten`` takes away (and never gives), the runs' passage,
folders made with the mode whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runyard.errors import ConfigError
from runyard.privacy import grant_passage, make_folder, restrict_process, tighten

RUN_GID = 4242
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def made(path: Path, mode: int, *, folder: bool = False) -> Path:
    if folder:
        path.mkdir()
    else:
        path.write_text("x")
    os.chmod(path, mode)
    return path


def test_tighten_closes_the_folder_and_its_first_level_only(tmp_path: Path) -> None:
    root = made(tmp_path / "ws", 0o755, folder=True)
    record = made(root / "state.db", 0o644)
    script = made(root / "run.sh", 0o755)
    kept = made(root / "server.json", 0o600)
    sub = made(root / "base", 0o775, folder=True)
    deep = made(sub / "task", 0o755, folder=True)
    outside = made(tmp_path / "elsewhere", 0o644)
    (root / "link").symlink_to(outside)
    changed = tighten([root, tmp_path / "missing"], "private")
    assert {c.path: (c.before, c.after) for c in changed} == {
        root: (0o755, 0o700), record: (0o644, 0o600), script: (0o755, 0o700),
        sub: (0o775, 0o700),
    }  # fmt: skip
    assert mode_of(kept) == 0o600 and mode_of(deep) == 0o755  # nothing deeper is walked
    assert mode_of(outside) == 0o644  # a symlink is never followed
    assert str(changed[0]) == f"{root} (0755 -> 0700)"


def test_group_mode_takes_other_users_away_and_never_widens(tmp_path: Path) -> None:
    root = made(tmp_path / "ws", 0o755, folder=True)
    log = made(root / "server.log", 0o644)
    secret = made(root / "server.json", 0o600)
    tighten([root], "group")
    assert (mode_of(root), mode_of(log), mode_of(secret)) == (0o750, 0o640, 0o600)


@needs_root
def test_tighten_leaves_other_users_and_sticky_folders_alone(tmp_path: Path) -> None:
    theirs = made(tmp_path / "theirs", 0o644)
    os.chown(theirs, 65534, 65534)
    sticky = made(tmp_path / "tmp", 0o1777, folder=True)
    os.chmod(tmp_path, 0o755)
    tighten([tmp_path], "private")
    assert (mode_of(theirs), mode_of(sticky), mode_of(tmp_path)) == (0o644, 0o1777, 0o700)


@needs_root
def test_the_runs_passage_survives_tightening(tmp_path: Path) -> None:
    root = made(tmp_path / "ws", 0o755, folder=True)
    grant_passage(root, RUN_GID, "private")
    info = root.lstat()
    assert (info.st_gid, stat.S_IMODE(info.st_mode)) == (RUN_GID, 0o710)
    tighten([root], "private", passage_gid=RUN_GID)
    assert mode_of(root) == 0o710
    tighten([root], "private")  # runs are the server's again: no passage is kept
    assert mode_of(root) == 0o700


@needs_root
def test_passage_is_never_granted_through_a_symlink_or_against_the_group(tmp_path: Path) -> None:
    target = made(tmp_path / "target", 0o700, folder=True)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        grant_passage(tmp_path / "link", RUN_GID, "private")
    assert target.lstat().st_gid != RUN_GID and mode_of(target) == 0o700
    shared = made(tmp_path / "shared", 0o2770, folder=True)
    with pytest.raises(ConfigError, match="workspace_mode: group"):
        grant_passage(shared, RUN_GID, "group")  # would take the workspace's group away
    os.chown(shared, -1, RUN_GID)
    grant_passage(shared, RUN_GID, "group")
    assert mode_of(shared) == 0o2770


def test_folders_are_made_with_the_mode_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        make_folder(tmp_path / "private" / "ws", "private")
        make_folder(tmp_path / "team", "group")
        existing = made(tmp_path / "existing", 0o755, folder=True)
        make_folder(existing, "private")
    finally:
        os.umask(previous)
    assert mode_of(tmp_path / "private" / "ws") == 0o700
    assert mode_of(tmp_path / "team") == 0o2770
    assert mode_of(existing) == 0o755  # an existing folder is tightened at serve, not here


def test_the_process_umask_follows_the_mode() -> None:
    previous = restrict_process("private")
    try:
        assert restrict_process("group") == 0o077
        assert restrict_process("private") == 0o007
        with pytest.raises(ConfigError, match="workspace_mode must be one of"):
            restrict_process("world")
    finally:
        os.umask(previous)
