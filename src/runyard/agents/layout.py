"""Where the agent-run backend keeps its files, and who owns them.

::

    <workspace>/agent/
      state.db                                   the store (SQLite, WAL)
      uploads/<artifact-id>-<name>               uploaded files, never written after upload
      workspaces/<run-id>/{in,out,tmp}           one run's folders (/workspace/{in,out,tmp})
      workspaces/<run-id>/exit-code              written by the launcher when the run ends
      session-state/<session-id>/{checkpoints,checkpoint-db,tool-cache}   /workspace/state
      sock/api.sock                              the API socket bound into sandboxes
    <log_dir>/agent/<run-id>.log                 a run's output (beside the task logs)

Folders a run writes are owned by the configured run UID/GID (``agent_run_uid`` /
``agent_run_gid``, else the server's own) with mode ``2770``: group-writable and setgid,
so everything created inside stays in the run group. Nothing is ever made ``0777``.
The workspace around them is the server's alone (``workspace_mode``); such runs are given
passage through it, search permission for their group on the folders on the way
(:meth:`AgentLayout.open_passage`).

A run can write its ``in/``, ``out/``, ``tmp/`` and the session's state folder, and may
leave symlinks there for the server to trip over. The server (often root) therefore never
changes anything there by name: folders are opened ``O_DIRECTORY | O_NOFOLLOW`` relative
to a descriptor of their parent, and ``fchown``/``fchmod``/``unlinkat``/``rmtree(dir_fd=)``
act on what was opened. A state subfolder (``checkpoints``, ``checkpoint-db``,
``tool-cache``) that an earlier run replaced by a symlink or a file is removed (the link
itself, never its target) and created again as an empty folder, so the session keeps
working; anything else out of place (a symlinked run or state folder, which no run can
make) fails the run's start with an error that names it.

A run's output files and the uploaded files are opened for serving without a race. A run
writes its ``out/`` while (and after) it is served, so a name can be swapped for a symlink
or a hard link at any moment: everything goes through :mod:`runyard.workspace.safefs`
(opened once, never through a symlink, streamed from the descriptor). Run outputs with other
hard links are neither listed nor served (a run can link a file it may read but must not
hand out, e.g. ``ln /workspace/in/x out/y``).

A run's ``out/final-answer.md`` is read bounded, never through a symlink.

Every path here is built from ids the layout checks first (:mod:`runyard.agents.ids`): a
session or run id that is not one path component (``..``, ``a/b``) raises
:class:`InvalidAgentId` before any path is made, whoever passed it (a request, a stored
record, a restored backup).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import mimetypes
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runyard.agents.errors import AgentConflict, AgentInvalid, AgentNotFound
from runyard.agents.ids import check_agent_id, check_stored_name
from runyard.errors import ConfigError, NoSuchFile, UnsafePath
from runyard.privacy import grant_passage, never_other
from runyard.workspace.filenames import name_from_shown, shown_name
from runyard.workspace.safefs import FileEntry, OpenedFile, open_under, walk_files

RUN_DIR_MODE = 0o2770
INPUT_FILE_MODE = 0o640
STATE_SUBDIRS = ("checkpoints", "checkpoint-db", "tool-cache")
RUN_SUBDIRS = ("in", "out", "tmp")
MAX_SOCKET_PATH = 100
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NODE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NOT_A_FOLDER = (errno.ELOOP, errno.ENOTDIR)
log = logging.getLogger("runyard.agents.layout")


def open_folder(path: Path) -> int:
    """A descriptor of the folder ``path``; :class:`AgentConflict` when it is a symlink."""
    try:
        return os.open(path, DIR_FLAGS)
    except OSError as exc:
        if exc.errno in NOT_A_FOLDER:
            raise AgentConflict(f"{path.name} is not a folder (a symlink?); not followed") from exc
        raise


def _open_node(path: Path) -> int:
    try:
        return os.open(path, NODE_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            message = f"{path.name} is a symbolic link; its target is not changed"
            raise AgentConflict(message) from exc
        raise


@dataclass(frozen=True)
class Ownership:
    """The UID/GID run folders get; ``None`` keeps the server's own."""

    uid: int | None = None
    gid: int | None = None

    @property
    def effective_uid(self) -> int:
        return os.getuid() if self.uid is None else self.uid

    @property
    def effective_gid(self) -> int:
        return os.getgid() if self.gid is None else self.gid

    @property
    def differs(self) -> bool:
        """True when runs execute as another user or group than the server."""
        return self.effective_uid != os.getuid() or self.effective_gid != os.getgid()

    def apply_fd(self, fd: int, mode: int) -> None:
        """Give the opened file or folder this ownership and ``mode``."""
        if self.uid is not None or self.gid is not None:
            uid = -1 if self.uid is None else self.uid
            os.fchown(fd, uid, -1 if self.gid is None else self.gid)
        os.fchmod(fd, mode)

    def apply(self, path: Path, mode: int) -> None:
        """:meth:`apply_fd` on ``path``, refused (never followed) when it is a symlink."""
        fd = _open_node(path)
        try:
            self.apply_fd(fd, mode)
        finally:
            os.close(fd)

    def apply_group_fd(self, fd: int, mode: int) -> None:
        """Keep the server as owner, give the run group, set ``mode``."""
        if self.gid is not None:
            os.fchown(fd, -1, self.gid)
        os.fchmod(fd, mode)

    def make_dir_at(self, parent_fd: int, name: str) -> int:
        """The folder ``name`` in ``parent_fd`` (created if missing) with this ownership and
        ``2770``, opened; raises ``OSError`` ELOOP/ENOTDIR when ``name`` is not a folder."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, RUN_DIR_MODE, dir_fd=parent_fd)
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        try:
            self.apply_fd(fd, RUN_DIR_MODE)
        except BaseException:
            os.close(fd)
            raise
        return fd


@dataclass(frozen=True)
class AgentLayout:
    root: Path
    log_dir: Path

    @property
    def db_path(self) -> Path:
        return self.root / "state.db"

    @property
    def uploads(self) -> Path:
        return self.root / "uploads"

    @property
    def workspaces(self) -> Path:
        return self.root / "workspaces"

    @property
    def session_states(self) -> Path:
        return self.root / "session-state"

    def run_dir(self, run_id: str) -> Path:
        return self.workspaces / check_agent_id(run_id, "run")

    def run_subdir(self, run_id: str, name: str) -> Path:
        return self.run_dir(run_id) / name

    def exit_file(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "exit-code"

    def log_path(self, run_id: str) -> Path:
        """A run's stdout and stderr: ``<log_dir>/agent/<run-id>.log``."""
        return self.log_dir / "agent" / f"{check_agent_id(run_id, 'run')}.log"

    def state_dir(self, session_id: str) -> Path:
        return self.session_states / check_agent_id(session_id, "session")

    def upload_path(self, stored_name: str) -> Path:
        return self.uploads / check_stored_name(stored_name)

    def socket_path(self) -> Path:
        """``sock/api.sock``, or ``/tmp/runyard-<hash>/api.sock`` when that is too long."""
        preferred = self.root / "sock" / "api.sock"
        if len(os.fsencode(preferred)) < MAX_SOCKET_PATH:
            return preferred
        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"runyard-{digest}" / "api.sock"

    def ensure(self) -> None:
        for folder in (self.root, self.uploads, self.workspaces, self.session_states):
            folder.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "agent").mkdir(parents=True, exist_ok=True)
        self.make_socket_folder()
        never_other(self.uploads)

    def open_passage(self, owner: Ownership, workspace_mode: str) -> None:
        """Runs executing as another user reach their folders (and the socket's) through
        the workspace: the runs' group gets passage on each folder on the way
        (:func:`runyard.privacy.grant_passage`); nothing when runs are the server's."""
        if not owner.differs:
            return
        way = (self.root.parent, self.root, self.workspaces, self.session_states)
        for folder in (*way, self.make_socket_folder()):
            grant_passage(folder, owner.effective_gid, workspace_mode)

    def make_socket_folder(self) -> Path:
        """Make the socket's folder; answers it.

        A workspace path too long for a socket puts it in ``/tmp/runyard-<hash>/``, a name
        anyone can work out from the workspace's path and make first. The socket in a
        folder another user owns (or may write, or a symlink to one) could be swapped for
        theirs, and the runs would hand it their tokens: such a folder is refused
        (:class:`ConfigError`, naming it). Inside the workspace, only its owner can.
        """
        folder = self.socket_path().parent
        if folder == self.root / "sock":
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)
            return folder
        with contextlib.suppress(FileExistsError):  # a dangling symlink there: refused below
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = folder.lstat()
        if (
            not stat.S_ISDIR(info.st_mode)
            or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) & 0o022
        ):
            raise ConfigError(
                f"The agent socket's folder {folder} is not a folder of this user's alone "
                "(another user's, writable by others, or a symlink): remove it, or use a "
                "shorter workspace path so the socket lives inside the workspace"
            )
        return folder

    def create_run_dirs(self, run_id: str, owner: Ownership) -> Path:
        run_dir = self.run_dir(run_id)
        run_dir.mkdir(exist_ok=False)
        run_fd = open_folder(run_dir)
        try:
            owner.apply_group_fd(run_fd, 0o2750)  # the run reads it, only the server writes it
            for name in RUN_SUBDIRS:
                os.close(_subfolder(run_fd, name, owner))
        finally:
            os.close(run_fd)
        return run_dir

    def ensure_state_dirs(self, session_id: str, owner: Ownership) -> Path:
        """The session's state folder and its subfolders, owned by the run user; a
        subfolder an earlier run replaced by a symlink or a file is made a folder again."""
        check_agent_id(session_id, "session")
        states_fd = open_folder(self.session_states)
        try:
            state_fd = _subfolder(states_fd, session_id, owner)
        finally:
            os.close(states_fd)
        try:
            for name in STATE_SUBDIRS:
                os.close(_state_subfolder(state_fd, name, owner))
        finally:
            os.close(state_fd)
        return self.state_dir(session_id)

    def clear_tmp(self, run_id: str) -> None:
        """Empty a finished run's ``tmp/`` (its ``in/`` and ``out/`` are kept)."""
        try:
            tmp_fd = os.open(self.run_subdir(run_id, "tmp"), DIR_FLAGS)
        except OSError:
            return  # gone, or not a folder: nothing of ours to empty
        try:
            with os.scandir(tmp_fd) as entries:
                names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for name, is_dir in names:
                with contextlib.suppress(OSError):
                    if is_dir:
                        shutil.rmtree(name, dir_fd=tmp_fd)  # fd-based: never leaves tmp/
                    else:
                        os.unlink(name, dir_fd=tmp_fd)
        finally:
            os.close(tmp_fd)


def _subfolder(parent_fd: int, name: str, owner: Ownership) -> int:
    """A folder only the server can have made; anything else there fails loudly."""
    try:
        return owner.make_dir_at(parent_fd, name)
    except OSError as exc:
        if exc.errno in NOT_A_FOLDER:
            raise AgentConflict(f"{name} is not a folder (a symlink?); not followed") from exc
        raise


def _state_subfolder(state_fd: int, name: str, owner: Ownership) -> int:
    """A state subfolder; a symlink or file a run left in its place is removed (the entry
    itself, not what it points to) and the folder made again."""
    for _ in range(3):
        try:
            return owner.make_dir_at(state_fd, name)
        except OSError as exc:
            if exc.errno not in NOT_A_FOLDER:
                raise
        log.warning("state entry %s was not a folder; replaced by an empty folder", name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=state_fd)
    raise AgentConflict(f"The session state entry {name} keeps changing; not a folder")


MAX_LISTED = 10_000


def list_output_files(out_dir: Path) -> list[dict[str, Any]]:
    """Regular, singly linked files under ``out_dir`` (symlinks not followed), by path."""
    try:
        entries = walk_files(out_dir, hidden=True, single_link=True, limit=MAX_LISTED)
    except (NoSuchFile, UnsafePath):
        return []
    return [_entry(entry) for entry in entries]


def _entry(entry: FileEntry) -> dict[str, Any]:
    media, _ = mimetypes.guess_type(entry.relative, strict=False)
    return {
        "path": shown_name(entry.relative),  # the name that downloads it
        "size": entry.info.st_size,
        "mediaType": media or "application/octet-stream",
        "modifiedAt": _iso(entry.info.st_mtime),
    }


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def open_output(out_dir: Path, relative: str) -> OpenedFile:
    """The regular file ``relative`` names under ``out_dir``, opened; never outside it."""
    return open_listed(out_dir, relative, "output file", single_link=True)


def open_listed(root: Path, shown: str, kind: str, *, single_link: bool) -> OpenedFile:
    """The file a listing names ``shown`` (its shown name: runyard.workspace.filenames)."""
    try:
        relative = name_from_shown(shown)
    except UnsafePath as exc:
        raise AgentInvalid(str(exc)) from exc
    return _open(root, relative, kind, single_link=single_link)


def open_upload(path: Path) -> OpenedFile:
    """An uploaded file, opened (uploads are hard-linked into runs' ``in/`` by design)."""
    return _open(path.parent, path.name, "uploaded file", single_link=False)


def _open(root: Path, relative: str, kind: str, *, single_link: bool) -> OpenedFile:
    try:
        return open_under(root, relative, hidden=True, single_link=single_link)
    except UnsafePath as exc:
        raise AgentInvalid(str(exc)) from exc
    except NoSuchFile as exc:
        raise AgentNotFound(kind, relative) from exc


FINAL_ANSWER = "final-answer.md"


def truncation_marker(size: int, kept: int) -> str:
    return f"\n\n[runyard: final answer truncated: it has {size} bytes, the first {kept} are kept]"


def read_final_answer(out_dir: Path, limit: int) -> str | None:
    """The answer text, at most ``limit`` bytes of it plus a marker; None when there is none.

    A missing, empty, non-regular or symlinked file counts as no answer.
    """
    try:
        fd = os.open(out_dir / FINAL_ANSWER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    if len(data) > limit:
        kept = _utf8_prefix(data[:limit])
        text = kept.decode("utf-8", "replace") + truncation_marker(info.st_size, len(kept))
    else:
        text = data.decode("utf-8", "replace")
    return text if text.strip() else None


def _utf8_prefix(data: bytes) -> bytes:
    """``data`` without a trailing partial UTF-8 character."""
    end = len(data)
    back = 0
    while back < min(4, end) and data[end - back - 1] & 0xC0 == 0x80:
        back += 1
    if back < end:
        lead = data[end - back - 1]
        if _sequence_length(lead) != back + 1:
            return data[: end - back - 1]
    return data


def _sequence_length(lead: int) -> int:
    if lead >> 5 == 0b110:
        return 2
    if lead >> 4 == 0b1110:
        return 3
    if lead >> 3 == 0b11110:
        return 4
    return 1


def read_exit_file(path: Path) -> int | None:
    """The exit code a run's launcher wrote to its ``exit-code`` file, or None (none yet,
    or unreadable)."""
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
