"""The agent-run client as coroutines: ``AsyncClient().agents`` (see :mod:`.agents`)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
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
from runyard.client.agents import (
    API,
    CHUNK,
    FINAL_ANSWER,
    JSON_TYPE,
    AgentsClient,
    checked,
    ident,
)
from runyard.client.calls import (
    IDEMPOTENCY_HEADER,
    KEYED_ATTEMPTS,
    RETRY_PAUSE,
    adapter,
    unreachable,
    without_none,
)
from runyard.client.pages import Page
from runyard.errors import NotFound, WaitTimeout

M = TypeVar("M", bound=BaseModel)


class AsyncAgentsClient:
    """The methods of :class:`~runyard.client.agents.AgentsClient`, each a coroutine;
    ``iter_runs`` is an async iterator."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self._http = http
        self.url = url

    async def _send(self, method: str, path: str, *, key: str | None = None, **kw: Any) -> Any:
        headers = {**kw.pop("headers", {}), **({IDEMPOTENCY_HEADER: key} if key else {})}
        if method != "GET" and not {"json", "files"} & set(kw):
            headers.update(JSON_TYPE)
        attempts = KEYED_ATTEMPTS if key else 1
        for attempt in range(attempts):
            try:
                reply = await self._http.request(method, API + path, headers=headers, **kw)
                return checked(reply).json()
            except httpx.TransportError as exc:
                if attempt + 1 >= attempts:
                    raise unreachable(self.url, exc) from exc
                await asyncio.sleep(RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _page(self, model: type[M], path: str, **params: Any) -> Page[M]:
        body = await self._send("GET", path, params=without_none(**params))
        items = adapter(list[model]).validate_python(body["items"])  # type: ignore[valid-type]
        return Page(items, next_cursor=body.get("nextCursor"))

    async def create_session(self, title: str | None = None) -> Session:
        return Session.model_validate(await self._send("POST", "/sessions", json={"title": title}))

    async def list_sessions(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Session]:
        return await self._page(Session, "/sessions", limit=limit, cursor=cursor)

    async def get_session(self, session: str | Session) -> Session:
        return Session.model_validate(await self._send("GET", f"/sessions/{ident(session)}"))

    async def close_session(self, session: str | Session) -> Session:
        body = await self._send("POST", f"/sessions/{ident(session)}/close")
        return Session.model_validate(body)

    async def reopen_session(self, session: str | Session) -> Session:
        body = await self._send("POST", f"/sessions/{ident(session)}/reopen")
        return Session.model_validate(body)

    async def upload(
        self,
        session: str | Session,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        relative_path: str | None = None,
        file_name: str | None = None,
    ) -> Artifact:
        data = without_none(sessionId=ident(session), relativePath=relative_path)
        if isinstance(file, str | os.PathLike):
            with open(file, "rb") as handle:
                return await self._upload(data, file_name or Path(file).name, handle)
        name = file_name or Path(str(getattr(file, "name", "upload"))).name
        return await self._upload(data, name, file)

    async def _upload(self, data: dict[str, str], name: str, handle: IO[bytes]) -> Artifact:
        # httpx reads a file object in chunks as it sends the multipart body
        files = {"file": (name, handle)}
        body = await self._send("POST", "/artifacts/upload", data=data, files=files, timeout=None)
        return Artifact.model_validate(body)

    async def list_artifacts(
        self, session: str | Session, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Artifact]:
        return await self._page(
            Artifact, "/artifacts", sessionId=ident(session), limit=limit, cursor=cursor
        )

    async def create_grant(
        self, session: str | Session, name: str, host_path: str, access: str = "ro"
    ) -> MountGrant:
        body = {"sessionId": ident(session), "name": name, "hostPath": host_path, "access": access}
        return MountGrant.model_validate(await self._send("POST", "/mount-grants", json=body))

    async def list_grants(
        self, session: str | Session, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[MountGrant]:
        return await self._page(
            MountGrant, "/mount-grants", sessionId=ident(session), limit=limit, cursor=cursor
        )

    async def revoke_grant(self, grant: str | MountGrant) -> MountGrant:
        grant_id = grant if isinstance(grant, str) else grant.id
        return MountGrant.model_validate(await self._send("DELETE", f"/mount-grants/{grant_id}"))

    async def list_checkpoints(
        self, session: str | Session, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Checkpoint]:
        path = f"/sessions/{ident(session)}/checkpoints"
        return await self._page(Checkpoint, path, limit=limit, cursor=cursor)

    async def fork_session(
        self, session: str | Session, run: str | Run, title: str | None = None
    ) -> Session:
        body = {"runId": ident(run), **({"title": title} if title else {})}
        path = f"/sessions/{ident(session)}/fork"
        return Session.model_validate(await self._send("POST", path, json=body))

    async def restore_session(self, session: str | Session, run: str | Run) -> Session:
        path = f"/sessions/{ident(session)}/restore"
        return Session.model_validate(await self._send("POST", path, json={"runId": ident(run)}))

    async def list_packages(self) -> list[AgentPackage]:
        items = (await self._send("GET", "/packages"))["items"]
        return [AgentPackage.model_validate(item) for item in items]

    async def create_run(
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
        body = without_none(
            sessionId=ident(session), userPrompt=prompt, systemPrompt=system_prompt,
            artifactIds=artifact_ids, mountGrantIds=mount_grant_ids, package=package,
        )  # fmt: skip
        body["enqueue"] = enqueue
        reply = await self._send("POST", "/runs", json=body, key=uuid.uuid4().hex)
        return Run.model_validate(reply)

    async def get_run(self, run: str | Run) -> Run:
        return Run.model_validate(await self._send("GET", f"/runs/{ident(run)}"))

    async def list_runs(
        self,
        session: str | Session | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Run]:
        session_id = ident(session) if session is not None else None
        return await self._page(Run, "/runs", sessionId=session_id, limit=limit, cursor=cursor)

    async def iter_runs(self, session: str | Session | None = None) -> AsyncIterator[Run]:
        cursor: str | None = None
        while True:
            page = await self.list_runs(session, cursor=cursor)
            for run in page:
                yield run
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def cancel_run(self, run: str | Run) -> Run:
        return Run.model_validate(await self._send("POST", f"/runs/{ident(run)}/cancel"))

    async def wait_run(
        self, run: str | Run, timeout: float | None = None, *, poll_interval: float = 0.25
    ) -> Run:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            record = await self.get_run(run)
            if record.terminal:
                return record
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"Run {record.id}", timeout or 0.0)
            pause = poll_interval
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            await asyncio.sleep(pause)

    async def answer(self, run: str | Run) -> str | None:
        try:
            data = await self.download(run, FINAL_ANSWER)
        except NotFound:
            return None
        return data.decode("utf-8", "replace")

    async def list_files(self, run: str | Run) -> list[OutputFile]:
        body = await self._send("GET", f"/runs/{ident(run)}/files")
        return [OutputFile.model_validate(item) for item in body["items"]]

    async def download(
        self, run: str | Run, path: str, to: str | os.PathLike[str] | IO[bytes] | None = None
    ) -> bytes:
        url = f"{API}/runs/{ident(run)}/files/{path}"
        try:
            async with self._http.stream("GET", url) as reply:
                if reply.status_code >= 400:
                    await reply.aread()
                    checked(reply)
                if to is None:
                    return await reply.aread()
                if isinstance(to, str | os.PathLike):
                    with open(to, "wb") as sink:
                        await _copy(reply, sink)
                else:
                    await _copy(reply, to)
        except httpx.TransportError as exc:
            raise unreachable(self.url, exc) from exc
        return b""


async def _copy(reply: httpx.Response, sink: IO[bytes]) -> None:
    async for chunk in reply.aiter_bytes(CHUNK):
        sink.write(chunk)


def _share_docs() -> None:
    """Each coroutine documents itself as its :class:`AgentsClient` counterpart does."""
    for name, method in vars(AsyncAgentsClient).items():
        counterpart = getattr(AgentsClient, name, None)
        if callable(method) and not method.__doc__ and counterpart is not None:
            method.__doc__ = counterpart.__doc__


_share_docs()
