"""The agent-run backend as the server holds it: one object per workspace.

    service = AgentService.for_workspace(settings, workspace, supervisor)
    service.start()                                  # reconcile: adopt or settle runs
    session = service.catalog.create_session("demo")
    run = service.runs.create(RunRequest(session.id, "summarise the data"))
    service.verify_run_token(token)                  # RunScope(run_id, session_id) or None
    service.stop()                                   # runs keep going; the next server adopts them

``socket_path`` is the Unix socket the server binds for sandboxed runs; requests on it
must carry a run token. The runs' processes and pods are the supervisor's
(:class:`runyard.runtime.supervisor.Supervisor`, whose one monitor thread watches tasks and
agent runs alike); a service opened on its own (:meth:`AgentService.open`) starts a
supervisor of its own that watches agent runs only.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from runyard.agents.catalog import Catalog
from runyard.agents.checkpoints import Checkpoints
from runyard.agents.context import SandboxChoice
from runyard.agents.layout import AgentLayout, Ownership
from runyard.agents.models import RunScope, hash_token, looks_like_run_token
from runyard.agents.runs import RunManager
from runyard.agents.store import AgentStore, SQLiteStore
from runyard.changes import ChangeHub
from runyard.config import Settings
from runyard.errors import ConfigError, RunyardError
from runyard.executors.local import LocalExecutor
from runyard.privacy import make_folder
from runyard.runtime.agentlaunch import choose_sandbox, user_prefix
from runyard.runtime.agentstart import RunStarter, StartContext
from runyard.runtime.executor import WorkerExecutor
from runyard.runtime.leftovers import log_removed
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

log = logging.getLogger("runyard.agents")


class AgentService:
    def __init__(
        self,
        settings: Settings,
        layout: AgentLayout,
        store: AgentStore,
        executor: WorkerExecutor | None = None,
        supervisor: Supervisor | None = None,
        changes: ChangeHub | None = None,
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.store = store
        self.owner = _owner(settings)
        _check_ownership(self.owner)
        # run streams wait on it (api/run_stream.py); a server's is shared with task streams
        self.changes = changes if changes is not None else ChangeHub()
        # without a server's supervisor: one of our own, watching agent runs only
        self._own_supervisor = supervisor is None
        self.supervisor = supervisor or _agents_only_supervisor(settings)
        # a Kubernetes executor is the supervisor's, shared with task runs (one watch)
        self._shared_executor = executor is None and settings.agent_executor == "kubernetes"
        self.executor = executor or build_executor(settings, self.supervisor)
        self.run_host = self.supervisor.agent_runs(self.executor, self._run_ended)
        self.supervisor.ended_agent_runs = self._ended_runs  # their cgroups go at its start
        self.catalog = Catalog(settings, layout, store, self.owner)
        self._choice: SandboxChoice | None = None
        self._stopped = False
        self._choice_lock = threading.Lock()
        self._starter = RunStarter(self._start_context())
        self.checkpoints = Checkpoints(settings, layout, store, self.catalog, self.owner)
        self.runs = RunManager(
            settings, layout, store, self.catalog, self._starter, self.run_host,
            self.changes.changed_all, self.checkpoints,
        )  # fmt: skip

    @classmethod
    def for_workspace(
        cls,
        settings: Settings,
        workspace: Workspace,
        supervisor: Supervisor,
        changes: ChangeHub | None = None,
    ) -> AgentService:
        """The server's service: its runs are watched by the server's ``supervisor`` and
        reported to the server's change hub."""
        root = Path(os.path.abspath(workspace.root)) / "agent"
        layout = _prepared_layout(settings, AgentLayout(root, Path(workspace.log_dir)))
        store = SQLiteStore(layout.db_path)
        return cls(settings, layout, store, supervisor=supervisor, changes=changes)

    @classmethod
    def open(cls, settings: Settings) -> AgentService:
        """A service on ``settings.workspace_dir`` without the rest of the server."""
        root = Path(os.path.abspath(settings.workspace_dir)) / "agent"
        make_folder(root.parent, settings.workspace_mode)
        layout = AgentLayout(root, Path(os.path.abspath(settings.log_dir)))
        layout = _prepared_layout(settings, layout)
        return cls(settings, layout, SQLiteStore(layout.db_path))

    @property
    def socket_path(self) -> Path:
        return self.layout.socket_path()

    @property
    def job_api_url(self) -> str | None:
        """Where runs reach the Job API over TCP (``kubernetes.job_api_url``), if they do."""
        return self._starter.api_url

    @property
    def sandbox(self) -> SandboxChoice:
        """How runs are isolated here, probed once (bubblewrap may exist yet not work)."""
        with self._choice_lock:
            if self._choice is None:
                self._choice = choose_sandbox(self.settings, self.owner)
                if self._choice.mode != "bwrap" and self.settings.agent_sandbox != "none":
                    log.warning("agent runs are not sandboxed: %s", self._choice.reason)
            return self._choice

    def _start_context(self) -> StartContext:
        return StartContext(
            settings=self.settings, layout=self.layout, store=self.store, owner=self.owner,
            executor=self.executor, runs=self.run_host,
            socket_path=self.socket_path, sandbox=lambda: self.sandbox,
        )  # fmt: skip

    def start(self) -> None:
        log_removed("unfinished uploads", self.catalog.sweep_uploads())
        # before any run is settled (and snapshotted) again
        log_removed("unfinished state snapshots", self.checkpoints.sweep())
        self.sandbox  # noqa: B018 - probe before the first run, not during it
        self.supervisor.start_monitor()  # the server's supervisor has started it already
        if not self.store.read_only:  # else adopted by reopen(), once the disk has room
            self.runs.start()

    def reopen(self) -> None:
        """Open a store the full disk left read-only for writing, then adopt and settle the
        runs as :meth:`start` would have; a space error while the disk is still full."""
        self.store.reopen()
        self.runs.start()

    def _ended_runs(self, run_ids: set[str]) -> set[str]:
        """Those of ``run_ids`` that are runs of this workspace the store holds as ended."""
        ended = set()
        for run_id in run_ids:
            try:
                run = self.store.get_run(run_id)
            except RunyardError:  # not an id of ours (another workspace's cgroup)
                continue
            if run is not None and run.state.terminal:
                ended.add(run_id)
        return ended

    def _run_ended(self, run_id: str, code: int | None, reason: str) -> None:
        self.runs.on_run_exit(run_id, code, reason)

    def stop(self) -> None:
        """Stop watching (runs keep going; the next server adopts them). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.runs.stop()
        self.run_host.close()
        if self._own_supervisor:
            self.supervisor.stop()
        if not self._shared_executor:  # else the supervisor's stop() closes it
            self.executor.close()
        self.store.close()

    def verify_run_token(self, token: str) -> RunScope | None:
        """The scope of a live run's token; None for anything else."""
        if not looks_like_run_token(token):
            return None
        run = self.store.run_by_token_hash(hash_token(token))
        if run is None or run.state.terminal or self.runs.ended_unrecorded(run.id):
            return None
        return RunScope(run.id, run.session_id)


def _agents_only_supervisor(settings: Settings) -> Supervisor:
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    return Supervisor(settings, workspace, TaskRegistry.load(plugins=False))


def build_executor(settings: Settings, supervisor: Supervisor) -> WorkerExecutor:
    """Local processes (sandboxed where bubblewrap works), or one Kubernetes Job per run
    (through the supervisor's executor, which task runs on Kubernetes share)."""
    if settings.agent_executor == "kubernetes":
        return supervisor.kubernetes_executor()
    return LocalExecutor()


def _owner(settings: Settings) -> Ownership:
    return Ownership(settings.agent_run_uid, settings.agent_run_gid)


def _prepared_layout(settings: Settings, layout: AgentLayout) -> AgentLayout:
    """``layout``'s folders made, and passage through the workspace for runs that execute
    as another user (checked first: only a root server can start them)."""
    layout.ensure()
    owner = _owner(settings)
    _check_ownership(owner)
    layout.open_passage(owner, settings.workspace_mode)
    return layout


def _check_ownership(owner: Ownership) -> None:
    if owner.differs and os.geteuid() != 0:
        raise ConfigError(
            "agent_run_uid/agent_run_gid name another user or group than the server's: "
            "starting runs as them needs a server running as root"
        )
    if owner.differs:
        user_prefix(owner)
