"""The agent-run client: sessions, uploads, runs, their answers and output files.

Reached as ``Client().agents``; it shares the client's connection and token::

    agents = client.agents
    session = agents.create_session("report")
    agents.upload(session, "data.csv")                 # streamed, never read whole
    run = agents.create_run(session, "Summarise data.csv")
    run = agents.wait_run(run, timeout=300)
    print(agents.answer(run))                         # out/final-answer.md, or None

``call`` answers any ``/api/v1`` route's JSON as the server sent it (camelCase names), and
``events`` a run's server-sent events, for tools that show the API's own answers.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
from pydantic import BaseModel

from runyard.client.agent_models import (
    AgentPackage,
    Artifact,
    Checkpoint,
    MountGrant,
    OutputFile,
    Run,
    Session,
)
from runyard.client.answers import STATUS_ERRORS, error_code, error_detail
from runyard.client.calls import (
    IDEMPOTENCY_HEADER,
    KEYED_ATTEMPTS,
    RETRY_PAUSE,
    adapter,
    unreachable,
    without_none,
)
from runyard.client.events import sse_messages
from runyard.client.pages import Page
from runyard.errors import HTTPError, NotFound, WaitTimeout

M = TypeVar("M", bound=BaseModel)
API = "/api/v1"
FINAL_ANSWER = "final-answer.md"
CHUNK = 1 << 20
# bodies are JSON; a bodyless state change needs no type, and saying JSON does no harm
JSON_TYPE = {"content-type": "application/json"}
# an event stream may be quiet between heartbeats for as long as the server likes
STREAM_TIMEOUT = httpx.Timeout(60, read=None)


def ident(record: str | Session | Run | Artifact) -> str:
    """The id of a record, or the id itself."""
    return record if isinstance(record, str) else record.id


def checked(reply: httpx.Response) -> httpx.Response:
    """The reply when it is not an error; else its :class:`HTTPError` with the server's
    message."""
    if reply.status_code >= 400:
        reply.read()
        error = STATUS_ERRORS.get(reply.status_code, HTTPError)
        raise error(reply.status_code, error_detail(reply), error_code(reply))
    return reply


class AgentsClient:
    """Sessions, uploads, runs and run files of ``/api/v1``.

    Every method taking a session, run or artifact accepts its record or its id.
    """

    def __init__(self, http: httpx.Client, url: str) -> None:
        self._http = http
        self.url = url

    def _send(self, method: str, path: str, *, key: str | None = None, **kwargs: Any) -> Any:
        headers = {**kwargs.pop("headers", {}), **({IDEMPOTENCY_HEADER: key} if key else {})}
        if method != "GET" and not {"json", "files"} & set(kwargs):
            headers.update(JSON_TYPE)
        attempts = KEYED_ATTEMPTS if key else 1
        for attempt in range(attempts):
            try:
                reply = self._http.request(method, API + path, headers=headers, **kwargs)
                return checked(reply).json()
            except httpx.TransportError as exc:
                if attempt + 1 >= attempts:
                    raise unreachable(self.url, exc) from exc
                time.sleep(RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def call(self, method: str, path: str, **options: Any) -> Any:
        """The JSON answer of ``method`` on ``/api/v1`` + ``path``, as the server sent it.

        ``options`` are httpx's (``json``, ``params``, ``data`` and ``files``, ``timeout``);
        a state change without a body is sent as JSON, as the server requires. A refusal
        raises its :class:`~runyard.errors.HTTPError` (with the server's ``code``), no
        answer :class:`~runyard.errors.ServerUnreachable`.
        """
        return self._send(method, path, **options)

    def events(self, run: str | Run) -> Iterator[tuple[str, Any]]:
        """The run's server-sent events as ``(kind, data)`` until the stream ends: ``state``
        and ``log`` as they come, ``end`` (``data["run"]`` is the final record) last.
        Losing the server raises :class:`~runyard.errors.ServerUnreachable`."""
        path = f"{API}/runs/{ident(run)}/events"
        try:
            with self._http.stream("GET", path, timeout=STREAM_TIMEOUT) as reply:
                checked(reply)
                yield from sse_messages(reply.iter_lines())
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc

    def _page(self, model: type[M], path: str, **params: Any) -> Page[M]:
        body = self._send("GET", path, params=without_none(**params))
        items = adapter(list[model]).validate_python(body["items"])  # type: ignore[valid-type]
        return Page(items, next_cursor=body.get("nextCursor"))

    # sessions

    def create_session(self, title: str | None = None) -> Session:
        """A new, open session."""
        return Session.model_validate(self._send("POST", "/sessions", json={"title": title}))

    def list_sessions(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Session]:
        """One page of sessions; pass ``next_cursor`` back as ``cursor`` for the next."""
        return self._page(Session, "/sessions", limit=limit, cursor=cursor)

    def get_session(self, session: str | Session) -> Session:
        """The session with its history of prompts and answers."""
        return Session.model_validate(self._send("GET", f"/sessions/{ident(session)}"))

    def close_session(self, session: str | Session) -> Session:
        """Close the session: it takes no new runs until reopened."""
        return Session.model_validate(self._send("POST", f"/sessions/{ident(session)}/close"))

    def reopen_session(self, session: str | Session) -> Session:
        """Open a closed session again."""
        return Session.model_validate(self._send("POST", f"/sessions/{ident(session)}/reopen"))

    # uploads

    def upload(
        self,
        session: str | Session,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        relative_path: str | None = None,
        file_name: str | None = None,
    ) -> Artifact:
        """Upload a file (a path or a binary file object) into the session, streamed in
        chunks: it is never read whole into memory. Runs see it under
        ``in/<relative_path>``, or under the name the server stored it as when none is
        given (``in/run-context.json`` lists every input)."""
        data = without_none(sessionId=ident(session), relativePath=relative_path)
        if isinstance(file, str | os.PathLike):
            with open(file, "rb") as handle:
                return self._upload(data, file_name or Path(file).name, handle)
        name = file_name or Path(str(getattr(file, "name", "upload"))).name
        return self._upload(data, name, file)

    def _upload(self, data: dict[str, str], name: str, handle: IO[bytes]) -> Artifact:
        # httpx reads a file object in chunks as it sends the multipart body
        files = {"file": (name, handle)}
        body = self._send("POST", "/artifacts/upload", data=data, files=files, timeout=None)
        return Artifact.model_validate(body)

    def list_artifacts(
        self, session: str | Session, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Artifact]:
        """One page of the session's uploads."""
        return self._page(
            Artifact, "/artifacts", sessionId=ident(session), limit=limit, cursor=cursor
        )

    # mount grants, checkpoints, packages

    def create_grant(
        self, session: str | Session, name: str, host_path: str, access: str = "ro"
    ) -> MountGrant:
        """Let the session's runs mount the host folder ``host_path`` as ``name``
        (``access``: ``ro`` or ``rw``); a run names the grants it mounts."""
        body = {"sessionId": ident(session), "name": name, "hostPath": host_path, "access": access}
        return MountGrant.model_validate(self._send("POST", "/mount-grants", json=body))

    def list_grants(
        self, session: str | Session, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[MountGrant]:
        """One page of the session's mount grants, revoked ones included."""
        return self._page(
            MountGrant, "/mount-grants", sessionId=ident(session), limit=limit, cursor=cursor
        )

    def revoke_grant(self, grant: str | MountGrant) -> MountGrant:
        """Revoke a grant: later runs can no longer mount it."""
        grant_id = grant if isinstance(grant, str) else grant.id
        return MountGrant.model_validate(self._send("DELETE", f"/mount-grants/{grant_id}"))

    def list_checkpoints(
        self, session: str | Session, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Checkpoint]:
        """One page of the session's checkpoints, newest first (one per run)."""
        path = f"/sessions/{ident(session)}/checkpoints"
        return self._page(Checkpoint, path, limit=limit, cursor=cursor)

    def fork_session(
        self, session: str | Session, run: str | Run, title: str | None = None
    ) -> Session:
        """A new session from the checkpoint ``run`` left: its history up to that run,
        its uploads and its state folder."""
        body = {"runId": ident(run), **({"title": title} if title else {})}
        path = f"/sessions/{ident(session)}/fork"
        return Session.model_validate(self._send("POST", path, json=body))

    def restore_session(self, session: str | Session, run: str | Run) -> Session:
        """Reset the session's state folder to the checkpoint ``run`` left."""
        path = f"/sessions/{ident(session)}/restore"
        return Session.model_validate(self._send("POST", path, json={"runId": ident(run)}))

    def list_packages(self) -> list[AgentPackage]:
        """The agent packages a run may name; ``default`` marks the one used otherwise."""
        return [
            AgentPackage.model_validate(item) for item in self._send("GET", "/packages")["items"]
        ]

    # runs

    def create_run(
        self,
        session: str | Session,
        prompt: str,
        *,
        system_prompt: str | None = None,
        artifact_ids: list[str] | None = None,
        mount_grant_ids: list[str] | None = None,
        package: str | None = None,
        enqueue: bool = False,
    ) -> Run:
        """Start a run of the session's agent on ``prompt``; answers it queued or running.

        ``artifact_ids`` default to all of the session's uploads, ``mount_grant_ids`` to
        its active grants, ``package`` to the configured agent package. ``enqueue`` queues
        it behind the session's active run instead of refusing. Sent with an
        Idempotency-Key, so a retry after a lost answer never starts a second run.
        """
        body = without_none(
            sessionId=ident(session), userPrompt=prompt, systemPrompt=system_prompt,
            artifactIds=artifact_ids, mountGrantIds=mount_grant_ids, package=package,
        )  # fmt: skip
        body["enqueue"] = enqueue
        return Run.model_validate(self._send("POST", "/runs", json=body, key=uuid.uuid4().hex))

    def get_run(self, run: str | Run) -> Run:
        """The run's current record."""
        return Run.model_validate(self._send("GET", f"/runs/{ident(run)}"))

    def list_runs(
        self,
        session: str | Session | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Run]:
        """One page of runs, newest first; of one session when ``session`` is given."""
        session_id = ident(session) if session is not None else None
        return self._page(Run, "/runs", sessionId=session_id, limit=limit, cursor=cursor)

    def iter_runs(self, session: str | Session | None = None) -> Iterator[Run]:
        """Every run (of ``session``, if given), newest first, fetched page by page."""
        cursor: str | None = None
        while True:
            page = self.list_runs(session, cursor=cursor)
            yield from page
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def cancel_run(self, run: str | Run) -> Run:
        """Ask the run to stop; answers its record (it ends as ``cancelled``)."""
        return Run.model_validate(self._send("POST", f"/runs/{ident(run)}/cancel"))

    def wait_run(
        self, run: str | Run, timeout: float | None = None, *, poll_interval: float = 0.25
    ) -> Run:
        """Wait for the run to end and answer its final record, whatever its state.
        Raises :class:`~runyard.errors.WaitTimeout` after ``timeout`` seconds (the run
        goes on: cancel it with :meth:`cancel_run`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            record = self.get_run(run)
            if record.terminal:
                return record
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"Run {record.id}", timeout or 0.0)
            pause = poll_interval
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            time.sleep(pause)

    # answers and files

    def answer(self, run: str | Run) -> str | None:
        """The run's final answer (``out/final-answer.md``) as text; ``None`` when the run
        wrote none."""
        try:
            data = self.download(run, FINAL_ANSWER)
        except NotFound:
            return None
        return data.decode("utf-8", "replace")

    def list_files(self, run: str | Run) -> list[OutputFile]:
        """The files the run wrote under ``out/``."""
        body = self._send("GET", f"/runs/{ident(run)}/files")
        return [OutputFile.model_validate(item) for item in body["items"]]

    def download(
        self, run: str | Run, path: str, to: str | os.PathLike[str] | IO[bytes] | None = None
    ) -> bytes:
        """The run's output file ``path`` (relative to ``out/``). With ``to`` (a path or a
        binary file object) it is streamed there and ``b""`` is answered; without, its
        bytes are."""
        return self._fetch(f"{API}/runs/{ident(run)}/files/{path}", to)

    def download_artifact(
        self, artifact: str | Artifact, to: str | os.PathLike[str] | IO[bytes] | None = None
    ) -> bytes:
        """An uploaded file's bytes, or streamed to ``to`` as :meth:`download` does."""
        return self._fetch(f"{API}/artifacts/{ident(artifact)}/content", to)

    def _fetch(self, url: str, to: str | os.PathLike[str] | IO[bytes] | None) -> bytes:
        try:
            with self._http.stream("GET", url) as reply:
                checked(reply)
                if to is None:
                    return reply.read()
                if isinstance(to, str | os.PathLike):
                    with open(to, "wb") as sink:
                        _copy(reply, sink)
                else:
                    _copy(reply, to)
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc
        return b""


def _copy(reply: httpx.Response, sink: IO[bytes]) -> None:
    for chunk in reply.iter_bytes(CHUNK):
        sink.write(chunk)
