"""The life of runs: create, dispatch, watch, finish, cancel, and reconcile after a restart.

A finished run's answer (``out/final-answer.md``, bounded) is folded into the session
history in the same transaction that sets its terminal state, so a reader that sees
``succeeded`` also sees the answer, and it is folded exactly once. One run per session is
active at a time; a run created with ``enqueue`` waits (``queued``) and starts when the
session's current run ends, after that run's answer is folded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from runyard.agents.catalog import MAX_PAGE, Catalog, check_limit, check_still_granted, visible
from runyard.agents.checkpoints import Checkpoints
from runyard.agents.errors import AgentInvalid, AgentNotFound, RunActive
from runyard.agents.heldsettles import HeldSettles, RunEnd, retryable
from runyard.agents.ids import check_agent_id
from runyard.agents.layout import AgentLayout, read_exit_file, read_final_answer
from runyard.agents.models import HistoryEntry, Page, Run, RunScope, Session, new_id
from runyard.agents.packages import resolve_package
from runyard.agents.snapshots import skipped
from runyard.agents.store import AgentStore
from runyard.config import Settings
from runyard.faults import fault_point
from runyard.wire import TaskState
from runyard.workspace.records import CANCEL_EXIT_CODE, utcnow
from runyard.workspace.space import space_shortage

log = logging.getLogger("runyard.agents")
SPACE_RECHECK_SECONDS = 2.0
MAX_PROMPT_CHARS = 1_000_000
CANCELLED = "cancelled"  # why a run was stopped: on request...
TIMED_OUT = "timeout"  # ...or past agent_run_timeout_seconds
DISK_QUOTA = "disk quota exceeded"  # ...or over agent_limits.disk_mb (the reason says more)
UNKNOWN_EXIT = -1000  # what an earlier store may hold for "ended unwatched"


class RunHost(Protocol):
    """The supervisor's side of agent runs (:class:`runyard.runtime.agentruns.AgentRuns`):
    it watches their processes or pods; this module decides what their ends mean."""

    def has_slot(self) -> bool: ...

    def of_session(self, session_id: str) -> list[str]: ...

    def watched(self, run_id: str) -> bool: ...

    def adopt(
        self, run_id: str, session_id: str, record: dict[str, Any], exit_file: Path,
        deadline: float, folders: tuple[Path, ...] = (),
    ) -> bool: ...  # fmt: skip

    def claim(self, run_id: str) -> tuple[int | None, str] | None: ...

    def exit_reason(self, run_id: str) -> str: ...  # a claimed run's, in its executor's words

    def release(self, run_id: str) -> None: ...  # after the claimed end is recorded

    def cancel(self, run_id: str, reason: str = CANCELLED, grace: float | None = None) -> bool: ...


class RunLauncher(Protocol):
    """Prepares a queued run's folders and context and launches it (state ``running``)."""

    def start(self, run: Run, session: Session) -> Run: ...


@dataclass
class RunRequest:
    """A run to create. ``None`` for ``artifact_ids``/``mount_grant_ids`` means all of the
    session's artifacts / active grants; a list (even empty) means exactly those."""

    session_id: str
    user_prompt: str
    system_prompt: str = ""
    artifact_ids: list[str] | None = None
    mount_grant_ids: list[str] | None = None
    package: str | None = None
    enqueue: bool = False
    run_id: str | None = None  # chosen by the caller (an idempotent request), else new


def outcome(
    code: int | None, reason: str, answer: str | None, timeout: float, detail: str = ""
) -> tuple:
    """``(state, exit_code, error)`` of a run that ended with ``code``; ``detail`` is the
    executor's account of that end (a pod's reason), added to the error in brackets."""
    if reason == CANCELLED:
        return TaskState.CANCELLED, CANCEL_EXIT_CODE, "Cancelled on request"
    if reason == TIMED_OUT:
        return TaskState.FAILED, code, f"Timed out after {timeout:g} s (agent_run_timeout_seconds)"
    if reason.startswith(DISK_QUOTA):
        return TaskState.FAILED, code, reason
    if code is None or code == UNKNOWN_EXIT:
        return TaskState.FAILED, None, "The run ended unwatched by a server and left no exit status"
    if code == 0 and answer is not None:
        return TaskState.SUCCEEDED, 0, ""
    state, error = TaskState.FAILED, _failure(code)
    return state, code, f"{error} ({detail})" if detail else error


def _failure(code: int) -> str:
    if code == 0:
        return "The agent exited 0 without writing out/final-answer.md"
    if code < 0 or 128 < code <= 128 + 64:  # a shell reports a signal as 128 + its number
        signal = -code if code < 0 else code - 128
        return f"The agent was killed by signal {signal}"
    return f"The agent exited with code {code}"


class RunManager:
    def __init__(
        self,
        settings: Settings,
        layout: AgentLayout,
        store: AgentStore,
        catalog: Catalog,
        starter: RunLauncher,
        host: RunHost,
        notify: Callable[[], None],
        checkpoints: Checkpoints | None = None,
    ) -> None:
        self.settings = settings
        self.checkpoints = checkpoints
        self.layout = layout
        self.store = store
        self.catalog = catalog
        self.starter = starter
        self.host = host
        self.notify = notify
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._space_recheck: threading.Timer | None = None  # a dispatch waiting for space
        self._space_waits = False
        self._locks_guard = threading.Lock()
        self._snapshot_locks: dict[str, threading.Lock] = {}
        # ends the store refused (a full disk): served as ended, written again until taken
        self._held = HeldSettles(self._write_held, self._held_written)
        if checkpoints is not None:
            checkpoints.quiet = self.quiet

    @contextmanager
    def quiet(self, session_id: str) -> Iterator[None]:
        """Hold off run starts; RunActive when a run of the session is queued or running."""
        with self._lock:
            self.refresh_session(session_id)
            for run in self.store.active_runs():
                if run.session_id == session_id:
                    raise RunActive(session_id, run.id)
            yield

    # queries
    def run(self, run_id: str, scope: RunScope | None = None) -> Run:
        run = self.store.get_run(check_agent_id(run_id, "run"))
        if run is None or not visible(scope, run.session_id):
            raise AgentNotFound("run", run_id)
        return self._held.shown(run)

    def ended_unrecorded(self, run_id: str) -> bool:
        """Whether the run ended and only its record waits for the store (a full disk)."""
        return self._held.holds(run_id)

    def list_runs(
        self, session_id: str | None, limit: int | None, cursor: str | None, scope: RunScope | None
    ) -> Page:
        """Runs of one session (every run when ``session_id`` is None), newest first."""
        if scope is not None:
            session_id = session_id or scope.session_id
        if session_id is not None:
            self.catalog.session(session_id, scope)
        page = self.store.list_runs(session_id, check_limit(limit), cursor)
        return Page([self._held.shown(run) for run in page.items], page.next_cursor)

    # creation
    def create(self, request: RunRequest, scope: RunScope | None = None) -> Run:
        session = self.catalog.writable_session(request.session_id, "start runs", scope)
        self.refresh_session(session.id)
        run = Run(
            id=request.run_id or new_id("run"),
            session_id=session.id,
            state=TaskState.QUEUED,
            user_prompt=_check_prompt(request.user_prompt),
            created_at=utcnow(),
            system_prompt=request.system_prompt or "",
            package=resolve_package(self.settings, request.package).name,
            artifact_ids=self._check_artifacts(session.id, request.artifact_ids),
            mount_grant_ids=self._check_grants(session.id, request.mount_grant_ids),
        )
        with self._lock:
            self.store.add_run(run, exclusive=not request.enqueue)
            self._dispatch(session.id)
        self.notify()
        return self.run(run.id)

    def _check_artifacts(self, session_id: str, ids: list[str] | None) -> list[str]:
        if ids is None:
            return [artifact.id for artifact in self._all(self.store.list_artifacts, session_id)]
        _refuse_duplicates(ids, "artifactIds")
        for artifact_id in ids:
            artifact = self.store.get_artifact(check_agent_id(artifact_id, "artifact"))
            if artifact is None:
                raise AgentInvalid(f"Unknown artifact {artifact_id!r}")
            if artifact.session_id != session_id:
                raise AgentInvalid(f"Artifact {artifact_id} belongs to another session")
        return list(ids)

    def _check_grants(self, session_id: str, ids: list[str] | None) -> list[str]:
        if ids is None:
            grants = self._all(self.store.list_grants, session_id)
            ids = [grant.id for grant in grants if not grant.revoked]
        _refuse_duplicates(ids, "mountGrantIds")
        for grant_id in ids:
            grant = self.store.get_grant(check_agent_id(grant_id, "mount grant"))
            if grant is None:
                raise AgentInvalid(f"Unknown mount grant {grant_id!r}")
            if grant.session_id != session_id:
                raise AgentInvalid(f"Mount grant {grant_id} belongs to another session")
            if grant.revoked:
                raise AgentInvalid(f"Mount grant {grant_id} is revoked")
            check_still_granted(grant.host_path, self.settings.allowed_mount_roots)
        return list(ids)

    @staticmethod
    def _all(list_page: Callable[..., Page], session_id: str) -> list[Any]:
        """Every record of a session's paged list, oldest first."""
        found: list[Any] = []
        cursor = None
        while True:
            page = list_page(session_id, MAX_PAGE, cursor)
            found += page.items
            cursor = page.next_cursor
            if cursor is None:
                return found[::-1]

    # dispatch
    def _dispatch(self, session_id: str) -> None:
        """Start the session's oldest queued run unless one of its runs is running or
        ``max_concurrent_runs`` runs are."""
        with self._lock:
            while not self._stopping.is_set() and self.host.has_slot():
                active = [r for r in self.store.active_runs() if r.session_id == session_id]
                if not active or any(r.state == TaskState.RUNNING for r in active):
                    return
                if self._short_of_space():
                    return
                self._start(active[0])

    def _short_of_space(self) -> bool:
        """Below ``min_free_mb`` free a queued run waits (launched, it would fail at its
        first write) and the dispatch is tried again in a moment."""
        reason = space_shortage(self.layout.root, self.settings.min_free_mb)
        if reason is None:
            self._space_waits = False
            return False
        if not self._space_waits:
            log.warning("queued agent runs wait: %s", reason)
            self._space_waits = True
        if self._space_recheck is None:
            self._space_recheck = threading.Timer(SPACE_RECHECK_SECONDS, self._recheck_space)
            self._space_recheck.daemon = True
            self._space_recheck.start()
        return True

    def _recheck_space(self) -> None:
        with self._lock:
            self._space_recheck = None
            if not self._stopping.is_set():
                self._dispatch_all()
        self.notify()

    def _dispatch_all(self) -> None:
        """Dispatch every session with a queued run, the one waiting longest first."""
        with self._lock:
            sessions = list(dict.fromkeys(r.session_id for r in self.store.active_runs()))
            for session_id in sessions:
                if not self.host.has_slot():
                    return
                self._dispatch(session_id)

    def _start(self, run: Run) -> None:
        # _dispatch starts a run only once no run of its session is running, and every
        # ended run was settled (its answer folded) before it stopped counting as running.
        session = self.store.get_session(run.session_id)
        if session is None or not session.writable:
            self._fail(run, "The session was closed before this queued run could start")
            return
        try:
            self.starter.start(run, session)
        except Exception as exc:
            if not isinstance(exc, (AgentInvalid, OSError)):
                log.exception("run %s could not start", run.id)
            self._fail(run, f"The run could not start: {exc}")

    def _fail(self, run: Run, error: str) -> None:
        self.store.finish_run(
            run.id, state=TaskState.FAILED, finished_at=utcnow(), exit_code=None,
            error=error, answer=None,
        )  # fmt: skip

    # exits
    def refresh_session(self, session_id: str) -> None:
        """Settle every run of the session whose process has ended (folding its answer)."""
        for run_id in self.host.of_session(session_id):
            self._claim(run_id)

    def _claim(self, run_id: str) -> bool:
        ended = self.host.claim(run_id)
        if ended is not None:
            self.on_run_exit(run_id, *ended)
        return ended is not None

    def on_run_exit(self, run_id: str, code: int | None, reason: str) -> None:
        """The supervisor saw the run end (``code`` None: unknown): settle it, start what
        waited for it."""
        # the snapshot first, outside the manager's lock: copying a large state folder holds
        # up no other session (this one cannot start another run while this one is running)
        self._snapshot(run_id)
        with self._lock:
            self._settle(run_id, code, reason)
            self._dispatch_all()
        self.host.release(run_id)  # its Job (or cgroup) goes only now that the end is recorded
        self.notify()

    def _settle(self, run_id: str, code: int | None, reason: str) -> None:
        limit = self.settings.agent_max_final_answer_bytes
        answer_text = read_final_answer(self.layout.run_subdir(run_id, "out"), limit)
        timeout = self.settings.agent_run_timeout_seconds
        detail = self.host.exit_reason(run_id)
        state, exit_code, error = outcome(code, reason, answer_text, timeout, detail)
        self._snapshot(run_id)
        now = utcnow()
        answer = HistoryEntry("assistant", answer_text, run_id, now) if answer_text else None
        end = RunEnd(state, now, exit_code, error, answer)
        try:
            self._record_end(run_id, end)
        except Exception as exc:
            if not retryable(exc):
                raise
            log.warning("Cannot record the end of run %s yet (held, retried): %s", run_id, exc)
            self._held.hold(run_id, end)

    def _record_end(self, run_id: str, end: RunEnd) -> None:
        fault_point("run.settle")
        finished = self.store.finish_run(
            run_id, state=end.state, finished_at=end.finished_at, exit_code=end.exit_code,
            error=end.error, answer=end.answer,
        )  # fmt: skip
        if finished is not None:
            self.layout.clear_tmp(run_id)

    def _write_held(self, run_id: str, end: RunEnd) -> None:
        with self._lock:
            self._record_end(run_id, end)

    def _held_written(self, run_id: str) -> None:
        with self._lock:
            self._dispatch_all()
        self.notify()

    def _snapshot(self, run_id: str) -> None:
        """The session's state as the run left it, kept before the run is seen as ended;
        once per run (whoever settles it first), one at a time per session."""
        run = self.store.get_run(run_id)
        if self.checkpoints is None or run is None or run.state.terminal:
            return
        with self._snapshot_lock(run.session_id):
            run = self.store.get_run(run_id)
            if run is None or run.state.terminal or run.checkpoint is not None:
                return
            try:
                self.checkpoints.after_run(run)
            except Exception as exc:  # a failed snapshot must not keep the run from ending
                log.exception("snapshot of the state after run %s failed", run_id)
                self._note_skipped(run_id, f"The snapshot failed: {exc}")

    def _note_skipped(self, run_id: str, why: str) -> None:
        try:
            self.store.set_checkpoint(run_id, skipped(why))
        except Exception as exc:  # a full disk: the run still ends, without the note
            if not retryable(exc):
                raise
            log.warning("Cannot note the skipped snapshot of run %s: %s", run_id, exc)

    def _snapshot_lock(self, session_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._snapshot_locks.setdefault(session_id, threading.Lock())

    # cancel
    def cancel(self, run_id: str, scope: RunScope | None = None) -> Run:
        run = self.run(run_id, scope)
        if run.state.terminal:
            return run
        with self._lock:
            if not self.host.watched(run_id):
                self._settle(run_id, None, CANCELLED)
                self.notify()
                return self.run(run_id)
        self.host.cancel(run_id, CANCELLED)
        return self._await_terminal(run_id, self.settings.cancel_grace_seconds + 10)

    def _await_terminal(self, run_id: str, timeout: float) -> Run:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.run(run_id)
            if run.state.terminal:
                return run
            self._claim(run_id)  # unless the supervisor's monitor did already
            time.sleep(0.02)
        return self.run(run_id)

    # lifecycle
    def start(self) -> None:
        self.reconcile()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self._space_recheck is not None:
                self._space_recheck.cancel()
        self._held.stop()  # an end still held is settled by the next start, from its exit file

    def reconcile(self) -> None:
        """Adopt runs a previous server left running; settle the ones that ended meanwhile."""
        for run in self.store.active_runs():
            if run.state == TaskState.RUNNING:
                self._adopt_or_settle(run)
            elif run.token_hash:
                self._fail(run, "The server stopped while this run was being launched")
        self._dispatch_all()
        self.notify()

    def _adopt_or_settle(self, run: Run) -> None:
        exit_file = self.layout.exit_file(run.id)
        deadline = _deadline(run.started_at, self.settings.agent_run_timeout_seconds)
        writable = (
            self.layout.run_subdir(run.id, "out"), self.layout.run_subdir(run.id, "tmp"),
            self.layout.state_dir(run.session_id),
        )  # fmt: skip
        if self.host.adopt(run.id, run.session_id, run.handle, exit_file, deadline, writable):
            if not self._claim(run.id):  # it ended just now: settled before anyone asks
                log.info("adopted run %s (%s)", run.id, run.handle)
            return
        code = read_exit_file(exit_file)
        self._settle(run.id, code, "")


def _check_prompt(prompt: str) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise AgentInvalid("userPrompt must be a non-empty string")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise AgentInvalid(f"userPrompt is longer than {MAX_PROMPT_CHARS} characters")
    return prompt


def _refuse_duplicates(ids: list[str], what: str) -> None:
    if len(set(ids)) != len(ids):
        raise AgentInvalid(f"{what} lists the same id more than once")


def _deadline(started_at: str | None, timeout: float) -> float:
    if not started_at:
        return time.monotonic() + timeout
    started = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    return time.monotonic() + (started + timeout - time.time())
