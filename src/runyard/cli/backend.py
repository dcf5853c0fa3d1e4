"""Where CLI commands get their answers: the workspace's server over HTTP, or the files.

The server of a workspace is ``--url``/``RUNYARD_URL`` or the address it recorded in
``<workspace>/server.json`` (with its token); without one, the local backend reads and acts
on the files.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from runyard.cli.locate import Place, full_settings, require_workspace
from runyard.cli.paging import Listed, Page, StatusRow, index_cursor, list_cursor, page_of
from runyard.client.answers import TASK_LIST_MAX
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
    from runyard.tasks.registry import TaskRegistry
    from runyard.wire import PluginReport
    from runyard.workspace.layout import Workspace
    from runyard.workspace.logs import TaskLogChunk
    from runyard.workspace.records import TaskStatus


class Backend(Protocol):
    def page(
        self, limit: int | None, after: str | None, state: str | None, task_type: str | None,
        text: str | None,
    ) -> Page:  # fmt: skip
        """At most ``limit`` statuses (``None``: all) newest first, after the task ``after``,
        with the count the filters keep."""

    def status(self, task_id: str) -> TaskStatus: ...
    def log(
        self, task_id: str, offset: int, limit: int, run_id: str | None = None
    ) -> TaskLogChunk: ...
    def graph(self, task_id: str) -> TaskGraph: ...
    def context(self, task_id: str) -> TaskContext: ...
    def cancel(self, task_id: str) -> bool: ...
    def delete(self, task_ids: list[str]) -> list[str]: ...
    def definitions(self) -> list[TaskDefinition]: ...
    def plugin_report(self) -> PluginReport:
        """The plugins that did not load and the tasks only a restart brings up to date."""


class RemoteBackend:
    """The server at ``url``. ``ls`` reads its task list as plain JSON over the light
    transport where that reaches it (:mod:`runyard.client.plain`); the rest, and a list
    behind TLS or a proxy, goes through the :class:`~runyard.client.Client`."""

    def __init__(self, url: str, token: str | None) -> None:
        from runyard.client.plain import PlainClient, plain_reaches

        self.url, self._token = url, token
        self._plain = PlainClient(url, token) if plain_reaches(url) else None
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            from runyard.client import Client

            self._client = Client(self.url, self._token)
        return self._client

    def health(self) -> bool:
        return self._plain.health() if self._plain is not None else self.client.health()

    def page(
        self, limit: int | None, after: str | None, state: str | None, task_type: str | None,
        text: str | None,
    ) -> Page:  # fmt: skip
        cursor = list_cursor(after, self.status(after).created_at) if after else None
        items: list[StatusRow] = []
        while True:  # one request for a page; --all goes on in the server's largest pages
            size = TASK_LIST_MAX if limit is None else min(limit - len(items), TASK_LIST_MAX)
            got, cursor, total = self._task_page(size, cursor, state, task_type, text)
            items.extend(got)
            if cursor is None or (limit is not None and len(items) >= limit):
                return page_of(items, total, cursor is not None)

    def _task_page(
        self, size: int, cursor: str | None, state: str | None, task_type: str | None,
        text: str | None,
    ) -> tuple[list[StatusRow], str | None, int]:  # fmt: skip
        query = {"cursor": cursor, "state": state, "task_type": task_type, "text": text}
        if self._plain is not None:
            records, next_cursor, total = self._plain.task_page(limit=size, **query)
            return [Listed(record) for record in records], next_cursor, total
        got = self.client.task_page(
            limit=size, cursor=cursor, state=state, task_type=task_type, text=text
        )
        return list(got), got.next_cursor, got.total or 0

    def status(self, task_id: str) -> TaskStatus:
        return self.client.status(task_id)

    def log(
        self, task_id: str, offset: int, limit: int, run_id: str | None = None
    ) -> TaskLogChunk:
        return self.client.read_task_log(task_id, offset, limit, run_id)

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

    def plugin_report(self) -> PluginReport:
        return self.client.plugins()


class LocalBackend:
    """Answers from the workspace files; dead workers found on the way are settled."""

    def __init__(self, place: Place | Settings) -> None:
        self.place = place
        self._settings: Settings | None = None
        self._workspace: Workspace | None = None
        self._repository: TaskRepository | None = None
        self._registry: TaskRegistry | None = None

    @property
    def settings(self) -> Settings:
        """The full settings (running or removing tasks reads more than the place)."""
        if self._settings is None:
            self._settings = full_settings(self.place)
        return self._settings

    @property
    def workspace(self) -> Workspace:
        """The workspace, which must exist (``WorkspaceNotFound`` says how to make one)."""
        if self._workspace is None:
            from runyard.workspace.layout import Workspace

            require_workspace(self.place)
            self._workspace = Workspace.open(self.place.workspace_dir, self.place.log_dir)
        return self._workspace

    @property
    def repository(self) -> TaskRepository:
        if self._repository is None:
            with collector_paused():
                from runyard.repository import TaskRepository

            self._repository = TaskRepository(self.workspace)
            self._repository.start(watch=False)
        return self._repository

    def page(
        self, limit: int | None, after: str | None, state: str | None, task_type: str | None,
        text: str | None,
    ) -> Page:  # fmt: skip
        cursor = index_cursor(after, self.status(after).created_at) if after else None
        items, more = self.repository.list_statuses(
            limit=limit, cursor=cursor, state=state, task_type=task_type, text=text
        )
        shown = [self._settled(status) for status in items]
        return page_of(shown, self._total(state, task_type, text), more is not None)

    def _total(self, state: str | None, task_type: str | None, text: str | None) -> int:
        """Tasks the filters keep: counted from the index, or matched when ``text`` asks."""
        if text:
            return len(
                self.repository.list_statuses(state=state, task_type=task_type, text=text)[0]
            )
        return sum(
            count
            for (kind, at), count in self.repository.counts().items()
            if (state is None or at == state) and (task_type is None or kind == task_type)
        )

    def status(self, task_id: str) -> TaskStatus:
        parse_task_id(task_id)
        status = self.workspace.read_status(task_id)
        if status is None:
            raise TaskNotFound(task_id)
        return self._settled(status)

    def _settled(self, status: TaskStatus) -> TaskStatus:
        """``status``, or what it is now if it is running and its worker died."""
        if status.state != "running":
            return status  # the runtime is not even imported
        from runyard.runtime.liveness import settle

        return settle(self.workspace, status)

    def log(
        self, task_id: str, offset: int, limit: int, run_id: str | None = None
    ) -> TaskLogChunk:
        from runyard.runtime.submitters import log_to_read
        from runyard.workspace.history import kept_run_log
        from runyard.workspace.logs import read_log_window

        status = self.status(task_id)
        path = log_to_read(self.workspace, status)
        if run_id is not None and run_id != status.run_id:
            path = kept_run_log(self.workspace, status, run_id)
        return read_log_window(path, offset, limit)

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
        return self.registry().definitions()

    def plugin_report(self) -> PluginReport:
        return self.registry().report()

    def registry(self) -> TaskRegistry:
        """This process's catalogue, loaded once (it imports every plugin)."""
        if self._registry is None:
            from runyard.tasks.registry import TaskRegistry

            self._registry = TaskRegistry.load()
        return self._registry


@contextmanager
def collector_paused() -> Iterator[None]:
    """No collection while the block imports, then what it made is frozen with the rest
    (see ``LazyTyper``): pydantic's tens of thousands of objects live until the exit, and
    the forty collections their making would set off find nothing (10 ms of a listing)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def parse_task_id(task_id: str) -> None:
    """Refuse a malformed task id (``InvalidTaskId``) before any file is looked at."""
    from runyard.workspace.identity import parse_task_id as parse

    parse(task_id)


def locate_server(
    settings: Place | Settings, url: str | None, token: str | None
) -> tuple[str, str | None] | None:
    """(address, token) of the server to talk to, or None when there is none.

    The token is ``--token``/``RUNYARD_TOKEN``, else the configured one, else the one the
    workspace's server recorded — the last only for that server's own address, so a token
    never travels to another server given with ``--url``.
    """
    from runyard.client.discovery import read_record

    info = read_record(settings.workspace_dir)
    address = url or (info["url"] if info else None)
    if address is None:
        return None
    recorded = None
    if info and info["url"].rstrip("/") == address.rstrip("/"):
        recorded = info["token"]
    return address, token or settings.token or recorded


def connect(
    settings: Place | Settings, url: str | None, token: str | None, *, timeout: float | None = None
) -> Client | None:
    """A client of the server :func:`locate_server` finds (``timeout`` bounds each request;
    None: no bound), or None when there is none."""
    located = locate_server(settings, url, token)
    if located is None:
        return None  # the files answer: the HTTP client is not even imported
    from runyard.client import Client

    return Client(*located, timeout=timeout)


def open_backend(settings: Place | Settings, url: str | None, token: str | None) -> Any:
    """The server when one is given or recorded and answering; else the files."""
    located = locate_server(settings, url, token)
    if located is None:
        return LocalBackend(settings)
    server = RemoteBackend(*located)
    if url is None and not server.health():
        return LocalBackend(settings)
    return server
