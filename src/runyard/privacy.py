"""Who may read a workspace: the server's user alone (``private``), or a group too (``group``).

::

    restrict_process("private")                  # umask 077 for this process and its children
    make_folder(root, "private")                 # 0700 when made here, whatever the umask
    changed = tighten([root, log_dir], "private")  # at ``serve``: an older workspace closed

| ``workspace_mode`` | folders | files | umask |
|---|---|---|---|
| ``private`` (default) | ``0700`` | ``0600`` | ``077`` |
| ``group`` | ``2770`` (setgid: what is made inside keeps the group) | ``0660``/``0640`` | ``007`` |

Never anything for other users. (In ``group`` mode a file runyard writes with ``0644``, as
its records, is ``0640``: the group reads it, the server alone replaces it.)

The umask is the one mechanism: set by each entry point that writes the workspace
(``serve``, the CLI's workspace commands), it is inherited by every process the server
starts (workers, the pre-forked launcher, agent runs), so records, logs, ``state.db`` and
its journal, uploads, history, staging and backups are all made with it. The workspace root
and the log folder are also made with their mode explicitly, so a workspace that a library
user's process (any umask) creates is closed too: with the root ``0700`` nothing below it
can be reached by anyone else.

A few modes are set on purpose and stay: a run's folders and a sandboxed task's folder
(``2770``/``2750``, group the runs' group), the files handed to a run (``0640``), and the
*passage*: when runs execute as another user (``agent_run_uid``/``agent_run_gid``), the
folders on the way to their folders give the runs' group search permission only (``0710``:
through, never a listing), see :func:`grant_passage`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runyard.errors import ConfigError

PRIVATE, GROUP = "private", "group"
NODE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
PASSAGE = 0o010  # search (x) for the group, never read


@dataclass(frozen=True)
class Modes:
    umask: int  # what a file or folder made by runyard never gets
    folder: int  # the workspace root and the log folder, when runyard makes them


MODES = {PRIVATE: Modes(0o077, 0o700), GROUP: Modes(0o007, 0o2770)}


def modes(mode: str) -> Modes:
    try:
        return MODES[mode]
    except KeyError:
        raise ConfigError(f"workspace_mode must be one of {sorted(MODES)}, not {mode!r}") from None


def restrict_process(mode: str) -> int:
    """Set this process's umask for ``mode`` (its children inherit it); the previous one."""
    return os.umask(modes(mode).umask)


def make_folder(path: Path, mode: str) -> None:
    """``path`` (and missing parents) made if missing; a folder made here gets ``mode``'s
    folder mode (setgid included, which ``mkdir`` alone never sets)."""
    path = Path(path)
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return  # made meanwhile by another process, with its own mode
    os.chmod(path, modes(mode).folder)


@dataclass(frozen=True)
class Tightened:
    path: Path
    before: int
    after: int

    def __str__(self) -> str:
        return f"{self.path} ({self.before:04o} -> {self.after:04o})"


def tighten(
    folders: Iterable[Path], mode: str, *, passage_gid: int | None = None
) -> list[Tightened]:
    """Take away what ``mode`` does not give: each of ``folders`` and what lies directly in
    it (never deeper: the folders' own mode already closes everything below them).

    Bits are only removed, never added. Only what this user owns is changed; symlinks,
    sockets and sticky folders (``/tmp``) are left alone. With ``passage_gid``, a folder
    of that group keeps its group search bit (the runs' passage, :func:`grant_passage`).
    """
    strip = modes(mode).umask  # the bits nothing in the workspace keeps
    changed: list[Tightened] = []
    for folder in dict.fromkeys(Path(f) for f in folders):
        found = _tighten_one(folder, strip, passage_gid)
        if found is None:
            continue  # missing, a symlink, another user's or sticky: nothing of ours
        if found.before != found.after:
            changed.append(found)
        for name in _names(folder):
            entry = _tighten_one(folder / name, strip, passage_gid)
            if entry is not None and entry.before != entry.after:
                changed.append(entry)
    return changed


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _tighten_one(path: Path, strip: int, passage_gid: int | None) -> Tightened | None:
    try:
        fd = os.open(path, NODE_FLAGS)
    except OSError:
        return None  # missing, a symlink (ELOOP), a socket (ENXIO): not ours to change
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & stat.S_ISVTX:
            return None
        before = stat.S_IMODE(info.st_mode)
        keep = PASSAGE if stat.S_ISDIR(info.st_mode) and info.st_gid == passage_gid else 0
        after = before & ~(strip & ~keep)
        if after != before:
            os.fchmod(fd, after)
        return Tightened(path, before, after)
    finally:
        os.close(fd)


def grant_passage(folder: Path, gid: int, mode: str) -> None:
    """Let group ``gid`` (the runs') pass through ``folder`` to what it may open below.

    ``private``: the folder's group becomes ``gid`` with search only (``0710``). ``group``:
    the folder already gives its group everything, so ``gid`` must be that group; another
    one is a :class:`ConfigError` (a folder has one group: giving the runs' group passage
    would take the workspace's group away). Never followed through a symlink.
    """
    fd = os.open(folder, NODE_FLAGS | os.O_DIRECTORY)
    try:
        info = os.fstat(fd)
        if mode == GROUP:
            if info.st_gid != gid:
                raise ConfigError(
                    f"workspace_mode: group opens {folder} to its group (gid {info.st_gid}), "
                    f"but runs execute as gid {gid} and could not reach their folders: "
                    "make the runs' group the workspace's (chgrp), or use workspace_mode: "
                    "private, where the runs' group is given passage only"
                )
            return
        if info.st_gid != gid:
            os.fchown(fd, -1, gid)
        wanted = (stat.S_IMODE(info.st_mode) & ~0o077) | PASSAGE
        if info.st_gid != gid or stat.S_IMODE(info.st_mode) != wanted:
            os.fchmod(fd, wanted)  # after the chown, which may clear setgid
    finally:
        os.close(fd)


def never_other(path: Path) -> None:
    """Take other users' bits off the folder ``path`` (what the umask left is kept)."""
    os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) & ~0o007)
