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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

RUN_DIR_MODE = 0o2770
INPUT_FILE_MODE = 0o640
STATE_SUBDIRS = ("checkpoints", "checkpoint-db", "tool-cache")
RUN_SUBDIRS = ("in", "out", "tmp")
MAX_SOCKET_PATH = 100


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

    def apply(self, path: Path, mode: int) -> None:
        """Give ``path`` this ownership and ``mode`` (chown only where it changes anything)."""
        if self.uid is not None or self.gid is not None:
            uid = -1 if self.uid is None else self.uid
            os.chown(path, uid, -1 if self.gid is None else self.gid)
        os.chmod(path, mode)

    def apply_group(self, path: Path, mode: int) -> None:
        """Keep the server as owner, give the run group, set ``mode``."""
        if self.gid is not None:
            os.chown(path, -1, self.gid)
        os.chmod(path, mode)

    def make_dir(self, path: Path) -> Path:
        path.mkdir(parents=False, exist_ok=True)
        self.apply(path, RUN_DIR_MODE)
        return path


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
        return self.workspaces / run_id

    def run_subdir(self, run_id: str, name: str) -> Path:
        return self.run_dir(run_id) / name

    def exit_file(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "exit-code"

    def log_path(self, run_id: str) -> Path:
        """A run's stdout and stderr: ``<log_dir>/agent/<run-id>.log``."""
        return self.log_dir / "agent" / f"{run_id}.log"

    def state_dir(self, session_id: str) -> Path:
        return self.session_states / session_id

    def upload_path(self, stored_name: str) -> Path:
        return self.uploads / stored_name

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
        self.socket_path().parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(self.uploads, 0o750)

    def create_run_dirs(self, run_id: str, owner: Ownership) -> Path:
        run_dir = self.run_dir(run_id)
        run_dir.mkdir(exist_ok=False)
        owner.apply_group(run_dir, 0o2750)  # the run reads it, only the server writes it
        for name in RUN_SUBDIRS:
            owner.make_dir(run_dir / name)
        return run_dir

    def ensure_state_dirs(self, session_id: str, owner: Ownership) -> Path:
        state = self.state_dir(session_id)
        owner.make_dir(state)
        for name in STATE_SUBDIRS:
            owner.make_dir(state / name)
        return state

    def clear_tmp(self, run_id: str) -> None:
        """Empty a finished run's ``tmp/`` (its ``in/`` and ``out/`` are kept)."""
        tmp = self.run_subdir(run_id, "tmp")
        if not tmp.is_dir() or tmp.is_symlink():
            return
        for entry in os.scandir(tmp):
            path = Path(entry.path)
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(path)
                else:
                    path.unlink()
