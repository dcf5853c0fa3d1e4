"""The long-lived parts a server holds, built once from the settings and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runyard.api.idempotency import IdempotencyStore
from runyard.api.login import BrowserSessions, LoginCodes
from runyard.api.readonly import ReadOnly
from runyard.changes import ChangeHub
from runyard.config import Settings
from runyard.privacy import make_folder
from runyard.repository import TaskRepository
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

if TYPE_CHECKING:
    from runyard.api.agentservice import AgentService
    from runyard.schedules.scheduler import Scheduler


@dataclass
class Services:
    settings: Settings
    workspace: Workspace
    registry: TaskRegistry
    repository: TaskRepository
    supervisor: Supervisor
    agents: AgentService | None = None
    # one hub for every event stream: task records and agent runs alike (runyard.changes)
    changes: ChangeHub = field(default_factory=ChangeHub)
    # The Idempotency-Key store, opened on the first keyed request (api/idempotent.py).
    idempotency: IdempotencyStore | None = None
    # the Studio's sign-in (api/login.py): serve mints the banner's code before the app exists
    login_codes: LoginCodes = field(default_factory=LoginCodes)
    browser_sessions: BrowserSessions = field(default_factory=BrowserSessions)
    # read-only on a full disk (api/readonly.py): serve makes it before the app exists
    read_only: ReadOnly = field(default_factory=ReadOnly)
    # the cron schedules (api/routes_schedules.py): made and started with the app
    schedules: Scheduler | None = None

    @classmethod
    def build(
        cls,
        settings: Settings,
        login_codes: LoginCodes | None = None,
        read_only: ReadOnly | None = None,
    ) -> Services:
        workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
        for folder in (workspace.root, workspace.log_dir):  # whatever this process's umask
            make_folder(folder, settings.workspace_mode)
        workspace.ensure()
        registry = TaskRegistry.load()
        repository = TaskRepository(workspace, snapshots=True)
        supervisor = Supervisor(settings, workspace, registry, on_change=repository.refresh)
        supervisor.known_tasks = repository  # its start reads no folder the index has read
        supervisor.on_records = repository.take_changes  # Kubernetes workers' writes
        supervisor.on_created = repository.take_created  # a submit's folder, not read back
        codes = login_codes or LoginCodes(settings.login_link_seconds)
        sessions = BrowserSessions(settings.studio_session_hours * 3600)
        services = cls(
            settings, workspace, registry, repository, supervisor,
            login_codes=codes, browser_sessions=sessions, read_only=read_only or ReadOnly(),
        )  # fmt: skip
        services.agents = _build_agents(services)
        return services

    def start(self) -> None:
        self.supervisor.start_cgroup_sweeper()  # ended runs' cgroups go before the index is built
        self.repository.start()
        self.supervisor.start()
        agents = self.agents
        if agents is not None:
            agents.start()
            if agents.store.full_disk is not None:  # its runs are adopted once it reopens
                self.read_only.defer("the agent store", agents.reopen, agents.store.full_disk)

    def stop(self) -> None:
        self.read_only.stop()
        if self.agents is not None:
            self.agents.stop()
        self.supervisor.stop()
        self.repository.stop()
        if self.idempotency is not None:
            self.idempotency.close()
            self.idempotency = None


def _build_agents(services: Services) -> AgentService:
    from runyard.api.agentservice import AgentService

    return AgentService.for_workspace(
        services.settings, services.workspace, services.supervisor, services.changes
    )
