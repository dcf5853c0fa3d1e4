"""The agents client of :mod:`runyard.client` as ``runyard agent`` uses it: the server and
token found as for every command, the API's JSON as it is, and refusals as CLI failures."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.cli.common import fail, load_settings

if TYPE_CHECKING:  # the client is imported by the calls, not at the CLI's start
    from runyard.client.agents import AgentsClient

REQUEST_TIMEOUT = 60.0


class AgentApi:
    """The agents client of :mod:`runyard.client` as the commands use it: the API's JSON as
    it is, and a refusal or a server that cannot be reached as one plain sentence (exit 2).
    Each call opens and closes its own connection, so nothing is left open when the
    command ends, whatever way it ends."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self.token = token

    @contextmanager
    def agents(self) -> Iterator[AgentsClient]:
        from runyard.client import Client

        with Client(self.url, self.token, timeout=REQUEST_TIMEOUT) as client:
            yield client.agents

    def call(self, method: str, path: str, **options: Any) -> Any:
        """The JSON answer of ``method`` on ``/api/v1`` + ``path``."""
        with self.refusals(), self.agents() as agents:
            return agents.call(method, path, **options)

    @contextmanager
    def refusals(self, *, waiting: bool = False) -> Iterator[None]:
        """Refusals fail the command with the server's message, status and code; losing the
        server too, unless ``waiting`` (the wait says the run may go on)."""
        from runyard.errors import HTTPError, ServerUnreachable

        try:
            yield
        except HTTPError as exc:
            fail(f"{exc.detail} ({exc.status_code} {exc.code})".replace(" )", ")"))
        except ServerUnreachable as exc:
            if waiting:
                raise
            fail(f"cannot reach the server at {self.url}: {exc.reason}")

    # checkpoints
    def checkpoints(
        self, session_id: str, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """A page of the session's checkpoints, newest first: ``{items, nextCursor}``."""
        params = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
        page: dict[str, Any] = self.call(
            "GET", f"/sessions/{session_id}/checkpoints", params=params
        )
        return page

    def fork(self, session_id: str, run_id: str, title: str | None = None) -> dict[str, Any]:
        """A new session from the checkpoint of ``run_id`` (history, uploads, state)."""
        body = {"runId": run_id, **({"title": title} if title else {})}
        fork: dict[str, Any] = self.call("POST", f"/sessions/{session_id}/fork", json=body)
        return fork

    def restore(self, session_id: str, run_id: str) -> dict[str, Any]:
        """Reset the session's state folder to the checkpoint of ``run_id``."""
        body = {"runId": run_id}
        session: dict[str, Any] = self.call("POST", f"/sessions/{session_id}/restore", json=body)
        return session

    def save(self, fetch: Callable[[AgentsClient, Any], bytes], output: Path | None) -> None:
        """``fetch(agents, to)`` streamed into ``output`` (stdout when None)."""
        with self.refusals(), self.agents() as agents:
            if output is None:
                fetch(agents, sys.stdout.buffer)
                sys.stdout.flush()
            else:
                fetch(agents, output)

    def stream(self, run_id: str) -> Iterator[tuple[str, Any]]:
        """The run's server-sent events as (kind, data); losing the server raises
        :class:`~runyard.errors.ServerUnreachable` (a wait says the run may go on)."""
        with self.refusals(waiting=True), self.agents() as agents:
            yield from agents.events(run_id)


def open_api(
    url: str | None, token: str | None, workspace_dir: Path | None, config: Path | None
) -> AgentApi:
    """The API of the server ``--url``/``RUNYARD_URL`` names or the workspace recorded
    (:func:`runyard.cli.backend.locate_server`); fails the command when there is none."""
    from runyard.cli.backend import locate_server

    settings = load_settings(workspace_dir, None, config)
    located = locate_server(settings, url, token)
    if located is None:
        fail("no server found for this workspace: start one with `runyard serve` or pass --url")
    return AgentApi(*located)
