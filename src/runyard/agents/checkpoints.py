"""Session checkpoints: the index of state snapshots, forking a session, restoring in place.

Every run, whatever its outcome, ends with a snapshot of its session's state folder
(:meth:`Checkpoints.after_run`, called by the run manager before the run's terminal state
is recorded, so a client that sees the run ended also sees its checkpoint). The run record
keeps the outcome as ``checkpoint``: ``present`` (files, bytes, what was skipped),
``skipped`` (and why) or ``pruned`` (dropped by ``state_snapshots.keep_last``).

* :meth:`Checkpoints.fork` — a new open session with the history up to and including that
  run's answer, the uploads those runs used (new records, hard links of the immutable
  upload files), and a state folder restored from the snapshot; ``forkedFrom`` names the
  origin, which is untouched.
* :meth:`Checkpoints.restore` — resets the session's state folder to a snapshot for its
  next run (409 while one of its runs is active) and notes it in the history as a
  ``system`` turn.

A run token sees only its own session: another session's checkpoints answer 404, and it
may not fork at all (forking creates a session).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from runyard.agents.catalog import Catalog, check_limit, check_scope
from runyard.agents.errors import AgentForbidden, AgentInvalid, AgentNotFound
from runyard.agents.ids import check_agent_id
from runyard.agents.layout import AgentLayout, Ownership, open_listed
from runyard.agents.models import (
    Artifact,
    HistoryEntry,
    Page,
    Run,
    RunScope,
    Session,
    SessionState,
    SessionStatus,
    check_title,
    new_id,
    placement_name,
)
from runyard.agents.placement import _copy_at
from runyard.agents.snapshots import Snapshots
from runyard.agents.store import AgentStore
from runyard.config import Settings
from runyard.workspace.records import utcnow
from runyard.workspace.safefs import OpenedFile

# holds the run manager's lock with no run of the session active (RunActive otherwise)
QuietSession = Callable[[str], AbstractContextManager[None]]


class Checkpoints:
    def __init__(
        self,
        settings: Settings,
        layout: AgentLayout,
        store: AgentStore,
        catalog: Catalog,
        owner: Ownership,
    ) -> None:
        limits = settings.state_snapshots
        self.layout = layout
        self.store = store
        self.catalog = catalog
        self.owner = owner
        self.snapshots = Snapshots(layout.root / "snapshots", limits.max_mb << 20, limits.keep_last)
        self.quiet: QuietSession | None = None  # set by the run manager

    # taking (called by the run manager)
    def after_run(self, run: Run) -> None:
        """Snapshot the session's state folder as the run left it, record it, prune."""
        state_dir = self.layout.state_dir(run.session_id)
        checkpoint = self.snapshots.take(state_dir, run.session_id, run.id)
        self.store.set_checkpoint(run.id, checkpoint)
        if checkpoint["state"] == "present":
            self._prune(run.session_id)

    def _prune(self, session_id: str) -> None:
        keep = self.snapshots.keep_last
        page = self.store.list_checkpoints(session_id, keep)
        cursor = page.next_cursor
        while cursor is not None:
            page = self.store.list_checkpoints(session_id, 100, cursor)
            for run in page.items:
                self.snapshots.remove(session_id, run.id)
                reason = "Pruned by state_snapshots.keep_last"
                self.store.set_checkpoint(
                    run.id, {**(run.checkpoint or {}), "state": "pruned", "reason": reason}
                )
            cursor = page.next_cursor

    def sweep(self) -> list[str]:
        return self.snapshots.sweep()

    # the index
    def index(
        self, session_id: str, limit: int | None, cursor: str | None, scope: RunScope | None
    ) -> Page:
        self.catalog.session(session_id, scope)
        page = self.store.list_checkpoints(session_id, check_limit(limit), cursor)
        return Page([index_entry(run) for run in page.items], page.next_cursor)

    def _checkpointed_run(self, session_id: str, run_id: str, scope: RunScope | None) -> Run:
        self.catalog.session(session_id, scope)
        run = self.store.get_run(check_agent_id(run_id, "run"))
        if run is None or run.session_id != session_id:
            raise AgentNotFound("run", run_id)
        checkpoint = run.checkpoint or {}
        if checkpoint.get("state") != "present":
            why = checkpoint.get("reason", "no snapshot was taken")
            raise AgentNotFound(f"checkpoint ({why}) of run", run_id)
        return run

    def files(self, session_id: str, run_id: str, scope: RunScope | None) -> list[dict[str, Any]]:
        self._checkpointed_run(session_id, run_id, scope)
        manifest = self.snapshots.manifest(session_id, run_id)
        return [
            {"path": f["path"], "size": f["size"], "sha256": f["sha256"]} for f in manifest["files"]
        ]

    def open_file(
        self, session_id: str, run_id: str, path: str, scope: RunScope | None
    ) -> OpenedFile:
        """A file of the snapshot, opened once (never through a symlink) for serving."""
        self._checkpointed_run(session_id, run_id, scope)
        folder = self.snapshots.files_dir(session_id, run_id)
        return open_listed(folder, path, "checkpoint file", single_link=False)

    # fork
    def fork(
        self, session_id: str, run_id: str, title: str | None, scope: RunScope | None
    ) -> Session:
        if scope is not None:
            check_scope(scope, session_id)
            raise AgentForbidden("A run token may not fork sessions")
        origin = self.catalog.session(session_id)
        run = self._checkpointed_run(session_id, run_id, None)
        history = history_until(origin.history, run.id)
        now = utcnow()
        fork = Session(
            id=new_id("ses"),
            title=check_title(title) if title else check_title(f"{origin.title} (fork)"[:200]),
            status=SessionStatus.OPEN,
            created_at=now,
            updated_at=now,
            history=history,
            forked_from={"sessionId": session_id, "runId": run.id},
        )
        state_dir = self.layout.ensure_state_dirs(fork.id, self.owner)
        try:
            self.snapshots.restore_into(session_id, run.id, state_dir, self.owner)
            self.layout.ensure_state_dirs(fork.id, self.owner)
            artifacts = [self._copy_artifact(a, fork.id, now) for a in self._used(history)]
        except BaseException:
            shutil.rmtree(state_dir, ignore_errors=True)  # no run has seen it yet
            raise
        self.store.create_session(fork)
        for artifact in artifacts:
            self.store.add_artifact(artifact)
        self.store.ensure_session_state(SessionState(fork.id, str(state_dir), now, now))
        return self.catalog.session(fork.id)

    def _used(self, history: list[HistoryEntry]) -> Iterator[Artifact]:
        """The artifacts the runs of ``history`` were given, once each, in order."""
        seen: set[str] = set()
        for run_id in dict.fromkeys(turn.run_id for turn in history if turn.run_id):
            run = self.store.get_run(run_id)
            for artifact_id in [] if run is None else run.artifact_ids:
                artifact = self.store.get_artifact(artifact_id)
                if artifact is not None and artifact_id not in seen:
                    seen.add(artifact_id)
                    yield artifact

    def _copy_artifact(self, artifact: Artifact, session_id: str, now: str) -> Artifact:
        """A record of ``artifact`` in the fork, naming a hard link of the same upload
        (uploads are never written after upload, so sharing the bytes is safe)."""
        artifact_id = new_id("art")
        stored = placement_name(artifact_id, artifact.file_name)
        source = self.layout.upload_path(artifact.stored_name)
        _link_or_copy(source, self.layout.upload_path(stored))
        return replace(
            artifact, id=artifact_id, session_id=session_id, stored_name=stored, created_at=now
        )

    # restore in place
    def restore(self, session_id: str, run_id: str, scope: RunScope | None) -> Session:
        session = self.catalog.writable_session(session_id, "restore checkpoints", scope)
        run = self._checkpointed_run(session_id, run_id, scope)
        assert self.quiet is not None
        with self.quiet(session.id):
            state_dir = self.layout.ensure_state_dirs(session.id, self.owner)
            self.snapshots.restore_into(session.id, run.id, state_dir, self.owner)
            self.layout.ensure_state_dirs(session.id, self.owner)
            now = utcnow()
            self.store.ensure_session_state(SessionState(session.id, str(state_dir), now, now))
            note = f"The state folder was restored to the checkpoint of run {run.id}."
            self.store.append_history(session.id, HistoryEntry("system", note, None, now))
        return self.catalog.session(session.id)


def index_entry(run: Run) -> dict[str, Any]:
    """One line of the checkpoint index: ``{runId, createdAt, files, bytes, skipped?}``."""
    checkpoint = run.checkpoint or {}
    entry = {
        "runId": run.id,
        "createdAt": checkpoint.get("createdAt"),
        "files": checkpoint.get("files", 0),
        "bytes": checkpoint.get("bytes", 0),
    }
    if checkpoint.get("skipped"):
        entry["skipped"] = checkpoint["skipped"]
    return entry


def history_until(history: list[HistoryEntry], run_id: str) -> list[HistoryEntry]:
    """The turns up to and including the last one of ``run_id`` (its answer, if any)."""
    last = max((i for i, turn in enumerate(history) if turn.run_id == run_id), default=None)
    if last is None:
        raise AgentInvalid(f"Run {run_id} has no turn in the session history")
    return list(history[: last + 1])


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP):
            raise
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.close(_copy_at(source, folder, target.name))
    finally:
        os.close(folder)
