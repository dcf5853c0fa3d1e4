"""A collection on the files, without a server (what ``runyard gc`` does when none runs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from runyard.agents.layout import AgentLayout
from runyard.agents.store.sqlite import SQLiteStore
from runyard.config import Settings
from runyard.repository import TaskRepository
from runyard.retention.collect import GcContext
from runyard.runtime.supervisor import Supervisor
from runyard.workspace.layout import Workspace


class FileBackend(Protocol):
    @property
    def workspace(self) -> Workspace: ...
    @property
    def repository(self) -> TaskRepository: ...
    def supervisor(self) -> Supervisor: ...


def local_context(settings: Settings, backend: FileBackend) -> GcContext:
    """Tasks deleted by a supervisor that is never started (as ``runyard rm`` does); the
    agent state only when the workspace has one (nothing is created here)."""
    supervisor = backend.supervisor()
    layout = AgentLayout(
        Path(os.path.abspath(settings.workspace_dir)) / "agent",
        Path(os.path.abspath(settings.log_dir)),
    )
    store = SQLiteStore(layout.db_path) if layout.db_path.is_file() else None
    return GcContext(
        workspace=backend.workspace,
        repository=backend.repository,
        delete=supervisor.delete,
        policy=settings.retention,
        agent_layout=layout if store is not None else None,
        agent_store=store,
    )
