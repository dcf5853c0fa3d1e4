"""The asynchronous client of the Job API: :class:`Client`'s methods as coroutines."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from runyard.client import answers, calls, pipelines, taskfiles, tracking
from runyard.client.calls import JobCall, checked_json
from runyard.client.events import ResultEvent, SSEParser, StreamEvent
from runyard.client.pages import Page
from runyard.client.sync import (
    CONNECT_TIMEOUT,
    MAX_RESUMES,
    Client,
    RunRef,
    auth_headers,
    recorded_server,
    request_timeout,
    resolve,
)
from runyard.errors import ServerUnreachable, WaitTimeout
from runyard.tls import client_verify
from runyard.wire import (
    TaskContext,
    TaskDefinition,
    TaskFile,
    TaskGraph,
    TaskHandle,
    TaskLogChunk,
    TaskRuns,
    TaskStatus,
)

if TYPE_CHECKING:  # the agents client loads on first use of ``.agents``
    from runyard.client.aio_agents import AsyncAgentsClient
    from runyard.client.schedules import AsyncSchedules

T = TypeVar("T")


class AsyncClient:
    """The same methods as :class:`Client`, each a coroutine; ``stream`` and
    ``iter_tasks`` are async iterators. Use ``async with``, or await :meth:`aclose`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        target: str | None = None,
        timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, token = resolve(url, token)
        self.url = url.rstrip("/")
        self.target = target
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=auth_headers(token),
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT),
            transport=transport,
            verify=client_verify(self.url),
        )
        self._agents: AsyncAgentsClient | None = None

    @classmethod
    def from_workspace(cls, path: str | os.PathLike[str] = ".", **options: Any) -> AsyncClient:
        """As :meth:`Client.from_workspace`."""
        return cls(*recorded_server(path), **options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections; the client is not usable afterwards."""
        await self._http.aclose()

    @property
    def agents(self) -> AsyncAgentsClient:
        """Sessions, uploads, runs and their files (``/api/v1``), as coroutines."""
        if self._agents is None:
            from runyard.client.aio_agents import AsyncAgentsClient

            self._agents = AsyncAgentsClient(self._http, self.url)
        return self._agents

    @property
    def schedules(self) -> AsyncSchedules:
        """Cron schedules (``/api/v1/schedules``, admin token), as coroutines."""
        from runyard.client.schedules import AsyncSchedules

        return AsyncSchedules(self._http, self.url)

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def _execute(self, call: JobCall[T]) -> T:
        body, headers = call.body(self.target), call.headers()
        for attempt in range(call.attempts()):
            try:
                reply = await self._http.post(
                    f"/jobs/{call.name}", json=body, headers=headers,
                    timeout=request_timeout(call),
                )  # fmt: skip
                return call.parse(reply)
            except httpx.TimeoutException as exc:
                if call.timeout is not None:
                    raise call.timed_out() from exc
                raise ServerUnreachable(self.url, "no answer in time") from exc
            except httpx.TransportError as exc:
                if attempt + 1 >= call.attempts():
                    raise calls.unreachable(self.url, exc) from exc
                await asyncio.sleep(calls.RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def call_job(self, name: str, answer: Any = Any, /, **arguments: Any) -> Any:
        """Any job of the server by name: :meth:`runyard.client.Client.call_job`."""
        return await self._execute(calls.any_job_call(name, arguments, answer))

    async def list_installed_task_definitions(self) -> list[TaskDefinition]:
        return await self._execute(calls.definitions_call())

    async def get_task_definition(self, task: str) -> TaskDefinition:
        return await self._execute(calls.definition_call(task))

    async def submit(
        self, task: str, *, name: str | None = None, sources: str | Iterable[str] = (),
        **fields: Any,
    ) -> TaskHandle:  # fmt: skip
        arguments = calls.submit_arguments(task, name, sources, fields)
        return await self._execute(calls.submit_call(arguments, uuid.uuid4().hex))

    async def wait(
        self, handle: RunRef, timeout: float | None = None, *, poll_interval: float = 1.0
    ) -> TaskStatus:
        return await self.wait_task(handle.task_id, handle.run_id, poll_interval, timeout=timeout)

    async def wait_task(
        self, task_id: str, run_id: str, poll_interval: float = 1.0, *,
        timeout: float | None = None,
    ) -> TaskStatus:  # fmt: skip
        return await self._execute(calls.wait_call(task_id, run_id, poll_interval, timeout))

    async def list_task_ids(self) -> list[str]:
        return await self._execute(calls.ids_call())

    async def list_task_statuses(
        self, *, limit: int | None = None, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, text: str | None = None,
    ) -> Page[TaskStatus]:  # fmt: skip
        call = calls.list_statuses_call(limit, cursor, state, task_type, text)
        return await self._execute(call)

    async def list_tasks(
        self, *, limit: int | None = None, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, text: str | None = None,
    ) -> Page[TaskStatus]:  # fmt: skip
        return await self.list_task_statuses(
            limit=limit, cursor=cursor, state=state, task_type=task_type, text=text
        )

    async def iter_tasks(
        self, *, state: str | None = None, task_type: str | None = None,
        text: str | None = None, page_size: int = calls.LIST_PAGE_SIZE,
    ) -> AsyncIterator[TaskStatus]:  # fmt: skip
        cursor: str | None = None
        while True:
            page = await self.list_task_statuses(
                limit=page_size, cursor=cursor, state=state, task_type=task_type, text=text
            )
            for status in page:
                yield status
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def status(self, task_id: str) -> TaskStatus:
        return await self._execute(calls.status_call(task_id))

    async def read_task_log(
        self, task_id: str, offset: int = -1, limit: int = 65536, run_id: str | None = None
    ) -> TaskLogChunk:
        return await self._execute(calls.log_call(task_id, offset, limit, run_id))

    async def stream_task(self, task_id: str, poll_interval: float = 0.5) -> TaskStatus:
        return await self._execute(calls.stream_call(task_id, poll_interval))

    async def get_task_graph(self, task_id: str) -> TaskGraph:
        return await self._execute(calls.graph_call(task_id))

    async def get_task_context(self, task_id: str) -> TaskContext:
        return await self._execute(calls.context_call(task_id))

    async def cancel(self, task_id: str) -> bool:
        return await self._execute(calls.cancel_call(task_id))

    async def delete_tasks(self, task_ids: list[str]) -> list[str]:
        return await self._execute(calls.delete_call(task_ids))

    # /api/v1 task routes (runyard.client.taskfiles)

    async def task_page(
        self, *, limit: int = 50, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, task: str | None = None, text: str | None = None,
        sort: str | None = None, order: str | None = None,
        params: Mapping[str, object] | None = None,
    ) -> Page[TaskStatus]:  # fmt: skip
        query = answers.task_list_params(
            limit=limit, cursor=cursor, state=state, task_type=task_type, task=task,
            text=text, sort=sort, order=order,
        )  # fmt: skip
        filtered: dict[str, Any] = {**query, **tracking.filter_query(params)}
        body = await self._api_json("GET", answers.TASK_LIST, params=filtered)
        return calls.task_list_page(body)

    async def task_runs(self, task_id: str) -> TaskRuns:
        body = await self._api_json("GET", taskfiles.task_path(task_id, "runs"))
        return taskfiles.runs_answer(body)

    async def task_run(self, task_id: str, run_id: str) -> taskfiles.TaskRunDetail:
        body = await self._api_json("GET", taskfiles.run_path(task_id, run_id))
        return taskfiles.run_answer(body)

    async def metrics(
        self, task_id: str, run_id: str | None = None, name: str | None = None,
        max_points: int | None = None,
    ) -> tracking.TaskMetrics:  # fmt: skip
        query = tracking.metrics_query(run_id, name, max_points)
        body = await self._api_json("GET", tracking.metrics_path(task_id), params=query)
        return tracking.metrics_answer(body)

    async def compare(self, ids: Iterable[str]) -> tracking.Comparison:
        query = tracking.compare_query(ids)
        return tracking.compare_answer(await self._api_json("GET", tracking.COMPARE, params=query))

    async def list_task_files(self, task_id: str) -> list[TaskFile]:
        body = await self._api_json("GET", taskfiles.task_path(task_id, "files"))
        return taskfiles.files_answer(body)

    async def download(
        self, task_id: str, path: str, run_id: str | None = None,
        dest: str | os.PathLike[str] | None = None,
    ) -> Path:  # fmt: skip
        return await taskfiles.download_async(self._http, self.url, task_id, path, run_id, dest)

    async def collect_garbage(
        self, *, dry_run: bool = False, include_upstreams: bool = False
    ) -> dict[str, Any]:
        body = {"dryRun": dry_run, "includeUpstreams": include_upstreams}
        return await self._api_json("POST", "/api/v1/gc", json=body)

    async def login_code(self) -> dict[str, Any]:
        return await self._api_json("POST", taskfiles.LOGIN_CODES, json={})

    async def _api_json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        try:
            reply = await self._http.request(method, path, **options)
        except httpx.TransportError as exc:
            raise calls.unreachable(self.url, exc) from exc
        return checked_json(reply)

    async def run_pipeline(self, pipeline: Any, **params: Any) -> dict[str, Any]:
        body = pipelines.run_body(pipeline, params)
        return await pipelines.apost_run(self._http, self.url, body)

    async def pipeline_runs(self, limit: int = 50) -> dict[str, Any]:
        return await self._pipelines_json("GET", pipelines.RUNS, params={"limit": limit})

    async def pipeline_run(self, run_id: str) -> dict[str, Any]:
        return await self._pipelines_json("GET", pipelines.run_path(run_id))

    async def cancel_pipeline_run(self, run_id: str) -> dict[str, Any]:
        return await self._pipelines_json("POST", pipelines.run_path(run_id, "cancel"))

    async def wait_pipeline_run(
        self, run_id: str, timeout: float | None = None, *, poll_interval: float = 0.5
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            run = await self.pipeline_run(run_id)
            if pipelines.finished(run):
                return run
            if deadline is not None and loop.time() >= deadline:
                raise WaitTimeout(f"Pipeline run {run_id}", timeout or 0.0)
            await asyncio.sleep(poll_interval)

    async def _pipelines_json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        try:
            reply = await self._http.request(method, path, **options)
        except httpx.TransportError as exc:
            raise calls.unreachable(self.url, exc) from exc
        return checked_json(reply)

    async def stream(self, task_id: str, poll_interval: float = 0.5) -> AsyncIterator[StreamEvent]:
        parser = SSEParser()
        body = calls.stream_call(task_id, poll_interval).body(self.target)
        for _ in range(MAX_RESUMES):
            headers = {"last-event-id": parser.last_id} if parser.last_id else {}
            try:
                async with self._http.stream(
                    "POST", "/jobs/stream_task/events", json=body, headers=headers
                ) as reply:
                    if reply.status_code != 200:
                        await reply.aread()
                        checked_json(reply)
                    async for line in reply.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                            if isinstance(event, ResultEvent):
                                return
            except httpx.TransportError as exc:
                if parser.last_id is None:
                    raise calls.unreachable(self.url, exc) from exc
        raise ServerUnreachable(self.url, "stream kept breaking off")


def _share_docs() -> None:
    """Each coroutine documents itself as its :class:`Client` counterpart does."""
    for name, method in vars(AsyncClient).items():
        counterpart = getattr(Client, name, None)
        if callable(method) and not method.__doc__ and counterpart is not None:
            method.__doc__ = counterpart.__doc__


_share_docs()
