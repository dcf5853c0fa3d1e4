"""Where CLI commands get their answers: the workspace's server over HTTP, or the files.

The server of a workspace is ``--url``/``RUNYARD_URL`` or the address it recorded in
``<workspace>/server.json`` (with its token); without one, the local backend reads and acts
on the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runyard.cli.locate import require_workspace
from runyard.errors import TaskNotFound

# the files backend needs the repository and runtime, the server backend only the client:
# each is imported where it is used, so a command pays only for the one it talks to
if TYPE_CHECKING:
    from runyard.client import Client
    from runyard.config import Settings
    from runyard.repository import TaskRepository
    from runyard.repository.models import TaskContext, TaskGraph
    from runyard.runtime.supervisor import Supervisor
    from runyard.tasks.base import TaskDefinition
    from runyard.workspace.layout import Workspace
    from runyard.workspace.logs import TaskLogChunk
    from runyard.workspace.records import TaskStatus


class Backend(Protocol):
    def statuses(
        self, limit: int | None, state: str | None, task_type: str | None, text: str | None
    ) -> list[TaskStatus]: ...
    def status(self, task_id: str) -> TaskStatus: ...
    def log(self, task_id: str, offset: int, limit: int) -> TaskLogChunk: ...
    def graph(self, task_id: str) -> TaskGraph: ...
    def context(self, task_id: str) -> TaskContext: ...
    def cancel(self, task_id: str) -> bool: ...
    def delete(self, task_ids: list[str]) -> list[str]: ...
    def definitions(self) -> list[TaskDefinition]: ...


@dataclass
class RemoteBackend:
    client: Client

    def statuses(
        self, limit: int | None, state: str | None, task_type: str | None, text: str | None
    ) -> list[TaskStatus]:
        return self.client.list_task_statuses(
            limit=limit, state=state, task_type=task_type, text=text
        )

    def status(self, task_id: str) -> TaskStatus:
        return self.client.status(task_id)

    def log(self, task_id: str, offset: int, limit: int) -> TaskLogChunk:
        return self.client.read_task_log(task_id, offset, limit)

    def graph(self, task_id: str) -> TaskGraph:
        return self.client.get_task_graph(task_id)

    def context(self, task_id: str) -> TaskContext:
        return self.client.get_task_context(task_id)

    def cancel(self, task_id: str) -> bool:
        return self.client.cancel(task_id)

    def delete(self, task_ids: list[str]) -> list[str]:
        return self.client.delete_tasks(task_ids)

    def definitions(self) -> list[TaskDefinition]:
        return self.client.list_installed_task_definitions()


class LocalBackend:
    """Answers from the workspace files; dead workers found on the way are settled."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._workspace: Workspace | None = None
        self._repository: TaskRepository | None = None

    @property
    def workspace(self) -> Workspace:
        """The workspace, which must exist (``WorkspaceNotFound`` says how to make one)."""
        if self._workspace is None:
            from runyard.workspace.layout import Workspace

            require_workspace(self.settings)
            self._workspace = Workspace.open(self.settings.workspace_dir, self.settings.log_dir)
        return self._workspace

    @property
    def repository(self) -> TaskRepository:
        if self._repository is None:
            from runyard.repository import TaskRepository

            self._repository = TaskRepository(self.workspace)
            self._repository.start(watch=False)
        return self._repository

    def statuses(
        self, limit: int | None, state: str | None, task_type: str | None, text: str | None
    ) -> list[TaskStatus]:
        from runyard.runtime.liveness import settle

        items, _ = self.repository.list_statuses(
            limit=limit, state=state, task_type=task_type, text=text
        )
        return [settle(self.workspace, s) if s.state == "running" else s for s in items]

    def status(self, task_id: str) -> TaskStatus:
        from runyard.runtime.liveness import settle

        parse_task_id(task_id)
        status = self.workspace.read_status(task_id)
        if status is None:
            raise TaskNotFound(task_id)
        return settle(self.workspace, status) if status.state == "running" else status

    def log(self, task_id: str, offset: int, limit: int) -> TaskLogChunk:
        from runyard.workspace.logs import read_log_window

        return read_log_window(self.status(task_id).log_path, offset, limit)

    def graph(self, task_id: str) -> TaskGraph:
        parse_task_id(task_id)
        return self.repository.graph(task_id)

    def context(self, task_id: str) -> TaskContext:
        parse_task_id(task_id)
        return self.repository.context(task_id)

    def supervisor(self) -> Supervisor:
        from runyard.runtime.supervisor import Supervisor
        from runyard.tasks.registry import TaskRegistry

        return Supervisor(self.settings, self.workspace, TaskRegistry.load())

    def cancel(self, task_id: str) -> bool:
        parse_task_id(task_id)
        return self.supervisor().cancel(task_id)

    def delete(self, task_ids: list[str]) -> list[str]:
        return self.supervisor().delete(task_ids)

    def definitions(self) -> list[TaskDefinition]:
        from runyard.tasks.registry import TaskRegistry

        return TaskRegistry.load().definitions()


def parse_task_id(task_id: str) -> None:
    """Refuse a malformed task id (``InvalidTaskId``) before any file is looked at."""
    from runyard.workspace.identity import parse_task_id as parse

    parse(task_id)


def locate_server(
    settings: Settings, url: str | None, token: str | None
) -> tuple[str, str | None] | None:
    """(address, token) of the server to talk to, or None when there is none.

    The token is ``--token``/``RUNYARD_TOKEN``, else the configured one, else the one the
    workspace's server recorded — the last only for that server's own address, so a token
    never travels to another server given with ``--url``.
    """
    from runyard.api.address import read_server_file

    info = read_server_file(settings)
    address = url or (info["url"] if info else None)
    if address is None:
        return None
    recorded = None
    if info and info["url"].rstrip("/") == address.rstrip("/"):
        recorded = info["token"]
    return address, token or settings.token or recorded


def connect(settings: Settings, url: str | None, token: str | None) -> Client | None:
    located = locate_server(settings, url, token)
    if located is None:
        return None  # the files answer: the HTTP client is not even imported
    from runyard.client import Client

    return Client(*located)


def open_backend(settings: Settings, url: str | None, token: str | None) -> Any:
    """The server when one is given or recorded and answering; else the files."""
    client = connect(settings, url, token)
    if client is None or (url is None and not client.health()):
        return LocalBackend(settings)
    return RemoteBackend(client)
