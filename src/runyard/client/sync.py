"""The synchronous client of the Job API (and, through ``client.agents``, of agent runs)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httpx

from runyard.client import answers, calls, pipelines, taskfiles, tracking
from runyard.client.answers import Reply, auth_headers
from runyard.client.calls import JobCall, checked_json
from runyard.client.discovery import find_server, read_record
from runyard.client.events import ResultEvent, SSEParser, StreamEvent
from runyard.client.pages import Page
from runyard.client.plain import KeptConnections, NoAnswer, plain_reaches
from runyard.errors import ServerNotFound, ServerUnreachable, WaitTimeout
from runyard.tls import client_verify
from runyard.wire import (
    PluginReport,
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
    from runyard.client.agents import AgentsClient
    from runyard.client.schedules import Schedules

T = TypeVar("T")
MAX_RESUMES = 20
CONNECT_TIMEOUT = 10.0


class RunRef(Protocol):
    """Anything naming one run of a task: a :class:`TaskHandle` or a :class:`TaskStatus`."""

    @property
    def task_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...


def resolve(url: str | None, token: str | None) -> tuple[str, str | None]:
    """(url, token): as given, or found as the CLI finds them when ``url`` is None."""
    if url is not None:
        return url, token
    found = find_server()
    return found.url, token if token is not None else found.token


def recorded_server(path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """(url, token) from ``<path>/server.json``, or ``<path>/.runyard/server.json``."""
    folder = os.fspath(path)
    if not os.path.exists(os.path.join(folder, "server.json")) and os.path.exists(
        os.path.join(folder, ".runyard", "server.json")
    ):
        folder = os.path.join(folder, ".runyard")
    info = read_record(folder)
    if info is None:
        raise ServerNotFound(f"No running runyard server is recorded in {folder}/server.json.")
    return info["url"], info["token"]


def request_timeout(call: JobCall[Any]) -> Any:
    """The call's own timeout, or httpx's marker for "the client's default"."""
    if call.timeout is None:
        return httpx.USE_CLIENT_DEFAULT
    return httpx.Timeout(call.timeout, connect=CONNECT_TIMEOUT)


class Client:
    """A client of one runyard server.

    ``Client()`` finds the server and its token as the ``runyard`` command does
    (``RUNYARD_URL``/``RUNYARD_TOKEN``, else the workspace's ``server.json`` found by
    walking up from the current directory, else the config); ``Client(url, token)`` talks
    to ``url``. ``timeout`` bounds each request (``None``: no bound, as waits need);
    ``target`` names the server-side target of the Job API, if any.

    The Job API calls go over kept-alive ``http.client`` connections when the server is
    reached by plain ``http://`` without a proxy (:mod:`runyard.client.plain`), else, as
    every other request, over httpx.

    Use it as a context manager, or call :meth:`close`. Failures raise
    :class:`runyard.errors.ClientError` subclasses; a job answering ``success: false``
    raises :class:`runyard.errors.JobFailed`.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        target: str | None = None,
        timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url, token = resolve(url, token)
        self.url = url.rstrip("/")
        self.target = target
        self._timeout = timeout
        self._plain: KeptConnections | None = None
        if transport is None and plain_reaches(self.url):
            headers = {"accept": "application/json", "content-type": "application/json"}
            self._plain = KeptConnections(self.url, {**headers, **auth_headers(token)})
        self._http = httpx.Client(
            base_url=self.url,
            headers=auth_headers(token),
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT),
            transport=transport,
            verify=client_verify(self.url),
        )
        self._agents: AgentsClient | None = None

    @classmethod
    def from_workspace(cls, path: str | os.PathLike[str] = ".", **options: Any) -> Client:
        """A client of the server running on the workspace at ``path`` (or ``path/.runyard``),
        with the token it recorded; ``options`` as for the constructor."""
        return cls(*recorded_server(path), **options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; the client is not usable afterwards."""
        if self._plain is not None:
            self._plain.close()
        self._http.close()

    @property
    def agents(self) -> AgentsClient:
        """Sessions, uploads, runs and their files (``/api/v1``), over this connection."""
        if self._agents is None:
            from runyard.client.agents import AgentsClient

            self._agents = AgentsClient(self._http, self.url)
        return self._agents

    @property
    def schedules(self) -> Schedules:
        """Cron schedules (``/api/v1/schedules``, admin token), over this connection."""
        from runyard.client.schedules import Schedules

        return Schedules(self._http, self.url)

    def health(self) -> bool:
        """True when the server answers its health check."""
        try:
            return self._http.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _execute(self, call: JobCall[T]) -> T:
        body, headers = call.body(self.target), call.headers()
        for attempt in range(call.attempts()):
            try:
                return call.parse(self._post(call, body, headers))
            except NoAnswer as exc:
                if exc.timed_out and call.timeout is not None:
                    raise call.timed_out() from exc
                if exc.timed_out or attempt + 1 >= call.attempts():
                    raise ServerUnreachable(self.url, exc.reason) from exc
                time.sleep(calls.RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, call: JobCall[Any], body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """The answer of ``POST /jobs/{name}``; :class:`NoAnswer` when there was none."""
        if self._plain is not None:
            timeout = call.timeout if call.timeout is not None else self._timeout
            return self._plain.request(
                "POST", f"/jobs/{call.name}", calls.json_body(body), headers, timeout=timeout
            )
        try:
            return self._http.post(
                f"/jobs/{call.name}", json=body, headers=headers, timeout=request_timeout(call)
            )
        except httpx.TimeoutException as exc:
            raise NoAnswer("no answer in time", timed_out=True) from exc
        except httpx.TransportError as exc:
            raise NoAnswer(calls.transport_reason(exc)) from exc

    def call_job(self, name: str, answer: Any = Any, /, **arguments: Any) -> Any:
        """Any job of the server by name, with its arguments as keywords; its answer,
        validated as the type ``answer`` (JSON as it came by default). ``JobFailed`` when
        it answers ``success: false``::

            pages = client.call_job("list_studio_pages")
            status = client.call_job("status", TaskStatus, task_id=task_id)
        """
        return self._execute(calls.any_job_call(name, arguments, answer))

    # tasks

    def list_installed_task_definitions(self) -> list[TaskDefinition]:
        """Every task the server can run, with its input and output schemas."""
        return self._execute(calls.definitions_call())

    def get_task_definition(self, task: str) -> TaskDefinition:
        """The definition of the task registered as ``task`` (e.g. ``"demo"``)."""
        return self._execute(calls.definition_call(task))

    def submit(
        self, task: str, *, name: str | None = None, sources: str | Iterable[str] = (),
        **fields: Any,
    ) -> TaskHandle:  # fmt: skip
        """Queue a run of ``task`` with input ``fields``; answers its :class:`TaskHandle`.

        ``name`` fixes the task's name (the CLI's ``--name``; a rerun under the same name
        replaces a finished task), else one is generated; ``sources`` are the full ids of
        upstream tasks. ``task_name=`` is a deprecated spelling of ``name=``.

        Sent with a fresh Idempotency-Key and retried on a lost connection, so a retry
        answers the first submit's handle and never runs the task twice.
        """
        arguments = calls.submit_arguments(task, name, sources, fields)
        return self._execute(calls.submit_call(arguments, uuid.uuid4().hex))

    def wait(
        self, handle: RunRef, timeout: float | None = None, *, poll_interval: float = 1.0
    ) -> TaskStatus:
        """Wait for the run ``handle`` names (as :meth:`submit` answers it) to end; answers
        its final status, failed or not. Raises :class:`~runyard.errors.WaitTimeout` after
        ``timeout`` seconds (the run goes on)."""
        return self.wait_task(handle.task_id, handle.run_id, poll_interval, timeout=timeout)

    def wait_task(
        self, task_id: str, run_id: str, poll_interval: float = 1.0, *,
        timeout: float | None = None,
    ) -> TaskStatus:  # fmt: skip
        """Wait for run ``run_id`` of ``task_id`` to end; as :meth:`wait`."""
        call = calls.wait_call(task_id, run_id, poll_interval, timeout)
        return self._execute(call)

    def list_task_ids(self) -> list[str]:
        """The ids of every task, newest first."""
        return self._execute(calls.ids_call())

    def list_task_statuses(
        self, *, limit: int | None = None, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, text: str | None = None,
    ) -> Page[TaskStatus]:  # fmt: skip
        """One page of task statuses, newest first, filtered by ``state``, ``task_type`` and
        ``text`` (a case-insensitive substring). The page is a list; pass its
        ``next_cursor`` back as ``cursor`` for the next page (``None``: last page)."""
        call = calls.list_statuses_call(limit, cursor, state, task_type, text)
        return self._execute(call)

    def list_tasks(
        self, *, limit: int | None = None, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, text: str | None = None,
    ) -> Page[TaskStatus]:  # fmt: skip
        """The same as :meth:`list_task_statuses`."""
        return self.list_task_statuses(
            limit=limit, cursor=cursor, state=state, task_type=task_type, text=text
        )

    def iter_tasks(
        self, *, state: str | None = None, task_type: str | None = None,
        text: str | None = None, page_size: int = calls.LIST_PAGE_SIZE,
    ) -> Iterator[TaskStatus]:  # fmt: skip
        """Every task status matching the filters, newest first, fetched page by page."""
        cursor: str | None = None
        while True:
            page = self.list_task_statuses(
                limit=page_size, cursor=cursor, state=state, task_type=task_type, text=text
            )
            yield from page
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def task_page(
        self, *, limit: int = 50, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, task: str | None = None, text: str | None = None,
        sort: str | None = None, order: str | None = None,
        params: Mapping[str, object] | None = None,
    ) -> Page[TaskStatus]:  # fmt: skip
        """One page of the task list as the Studio shows it (``GET /api/v1/tasks``): at most
        ``limit`` (1-1000) statuses sorted by ``sort`` (default ``created_at``) in ``order``
        (default ``desc``), filtered as :meth:`list_task_statuses` and by ``task`` (the
        registered task name). ``sort`` may name a tracked key (``"metrics.cv_r2:desc"``,
        ``"params.alpha"``); ``params`` keeps tasks whose params have those values
        (``{"model": "ridge"}``). ``page.total`` counts what the filters keep over all pages;
        pass ``page.next_cursor`` back as ``cursor`` (same sort and order) for the next."""
        query = answers.task_list_params(
            limit=limit, cursor=cursor, state=state, task_type=task_type, task=task,
            text=text, sort=sort, order=order,
        )  # fmt: skip
        filtered: dict[str, Any] = {**query, **tracking.filter_query(params)}
        try:
            reply = self._http.get(answers.TASK_LIST, params=filtered)
        except httpx.TransportError as exc:
            raise calls.unreachable(self.url, exc) from exc
        return calls.task_list_page(checked_json(reply))

    def task_runs(self, task_id: str) -> TaskRuns:
        """A task's runs, newest first (``GET /api/v1/tasks/{id}/runs``): ``.runs`` holds
        the current run first, then those fixed-name reruns replaced, each a
        :class:`~runyard.wire.TaskRunEntry` (run_id, state, times, exit_code, error,
        current). A missing task raises ``NotFound``."""
        return taskfiles.runs_answer(self._api_json("GET", taskfiles.task_path(task_id, "runs")))

    def task_run(self, task_id: str, run_id: str) -> taskfiles.TaskRunDetail:
        """One run of a task, current or earlier (``GET /api/v1/tasks/{id}/runs/{run_id}``):
        its state and times, ``config``, ``params``, ``metrics`` (a summary per metric),
        ``result`` and ``files`` (path, size, sha256), each downloadable with
        ``download(task_id, path, run_id=run_id)``. An unknown run raises ``NotFound``."""
        body = self._api_json("GET", taskfiles.run_path(task_id, run_id))
        return taskfiles.run_answer(body)

    def metrics(
        self, task_id: str, run_id: str | None = None, name: str | None = None,
        max_points: int | None = None,
    ) -> tracking.TaskMetrics:  # fmt: skip
        """A task's metrics over steps (``GET /api/v1/tasks/{id}/metrics``): ``.runs`` holds
        each run (the current one first, then kept ones newest first; only ``run_id`` when
        given), each with a :class:`~runyard.client.tracking.MetricSeries` per metric
        (``steps``, ``values``, ``times`` in logged order). ``name`` keeps one metric;
        ``max_points`` (2-10000) thins each series, keeping its first, last and extremes.
        A missing task or run raises ``NotFound``."""
        query = tracking.metrics_query(run_id, name, max_points)
        body = self._api_json("GET", tracking.metrics_path(task_id), params=query)
        return tracking.metrics_answer(body)

    def compare(self, ids: Iterable[str]) -> tracking.Comparison:
        """2-20 runs side by side (``GET /api/v1/compare``): each of ``ids`` is a task id
        or name, ``<task>@<run id>`` for an earlier run. ``.params`` lists each param with
        a value per run, those that differ first; ``.metrics`` a summary per run."""
        body = self._api_json("GET", tracking.COMPARE, params=tracking.compare_query(ids))
        return tracking.compare_answer(body)

    def list_task_files(self, task_id: str) -> list[TaskFile]:
        """The files of the task's folder a download serves (``GET /api/v1/tasks/{id}/files``),
        each with its ``path`` (as :meth:`download` takes it) and ``size``."""
        body = self._api_json("GET", taskfiles.task_path(task_id, "files"))
        return taskfiles.files_answer(body)

    def download(
        self, task_id: str, path: str, run_id: str | None = None,
        dest: str | os.PathLike[str] | None = None,
    ) -> Path:  # fmt: skip
        """Save the task's file ``path`` (relative to its folder, as listed), streamed, to
        ``dest``: a file path, or a folder to save it in under its own name (default: the
        current folder); answers the path written. It is written beside its place and
        renamed there once whole, so a failed download leaves nothing. With ``run_id``,
        that run's file (the current run's or an earlier, kept one's; an unknown run raises
        ``NotFound``). A missing file raises ``NotFound`` (a running task's: "not written
        yet")."""
        return taskfiles.download(self._http, self.url, task_id, path, run_id, dest)

    def login_code(self) -> dict[str, Any]:
        """A one-time code for a Studio login link (``POST /api/v1/login/codes``, the server
        token only): ``{"code", "expiresInSeconds"}``; ``code`` is None on a server without
        a token."""
        return self._api_json("POST", taskfiles.LOGIN_CODES, json={})

    def collect_garbage(
        self, *, dry_run: bool = False, include_upstreams: bool = False
    ) -> dict[str, Any]:
        """Garbage collection by the server, as its ``retention`` settings say
        (``POST /api/v1/gc``, admin token only); answers the report: ``{"dry_run",
        "tasks", "logs", "run_workspaces", "uploads", "kept_upstreams", "bytes", ...}``."""
        body = {"dryRun": dry_run, "includeUpstreams": include_upstreams}
        return self._api_json("POST", "/api/v1/gc", json=body)

    # pipelines

    def run_pipeline(self, pipeline: Any, **params: Any) -> dict[str, Any]:
        """Start a run of ``pipeline`` (a :class:`runyard.Pipeline`) with ``params`` over
        its defaults (``POST /api/v1/pipelines/runs``): every step is made in this one
        request, each waiting for its upstreams, or none is (a refused step raises
        :class:`~runyard.errors.RequestInvalid` naming it). Answers the run: ``{"id",
        "pipeline", "params", "created_at", "state", "steps": [{"key", "task", "task_id",
        "depends_on", "state", ...}]}``. Sent with an Idempotency-Key, and again after a lost
        connection: a retry answers the first run, never a second one."""
        body = pipelines.run_body(pipeline, params)
        return pipelines.post_run(self._http, self.url, body)

    def pipeline_runs(self, limit: int = 50) -> dict[str, Any]:
        """The newest pipeline runs: ``{"items": [run, ...], "total": N}``."""
        return self._api_json("GET", pipelines.RUNS, params={"limit": limit})

    def pipeline_run(self, run_id: str) -> dict[str, Any]:
        """One pipeline run with its steps' live states; ``NotFound`` when there is none."""
        return self._api_json("GET", pipelines.run_path(run_id))

    def cancel_pipeline_run(self, run_id: str) -> dict[str, Any]:
        """Cancel the run's unfinished steps; the run, with ``cancelled`` (the task ids)."""
        return self._api_json("POST", pipelines.run_path(run_id, "cancel"))

    def wait_pipeline_run(
        self, run_id: str, timeout: float | None = None, *, poll_interval: float = 0.5
    ) -> dict[str, Any]:
        """Wait until every step of the run ended; the run. Raises
        :class:`~runyard.errors.WaitTimeout` after ``timeout`` seconds (the run goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.pipeline_run(run_id)
            if pipelines.finished(run):
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"Pipeline run {run_id}", timeout or 0.0)
            time.sleep(poll_interval)

    def plugins(self) -> PluginReport:
        """The server's task names, the plugins that did not load and why, and the tasks
        only a server restart brings up to date (``GET /api/v1/plugins``)."""
        return PluginReport.model_validate(self._api_json("GET", "/api/v1/plugins"))

    def rescan_plugins(self) -> PluginReport:
        """Make the server look for newly installed plugins now (``POST
        /api/v1/plugins/rescan``, admin token only); ``added`` names the tasks it found."""
        return PluginReport.model_validate(self._api_json("POST", "/api/v1/plugins/rescan"))

    def _api_json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        try:
            reply = self._http.request(method, path, **options)
        except httpx.TransportError as exc:
            raise calls.unreachable(self.url, exc) from exc
        return checked_json(reply)

    def status(self, task_id: str) -> TaskStatus:
        """The current status of ``task_id``."""
        return self._execute(calls.status_call(task_id))

    def read_task_log(
        self, task_id: str, offset: int = -1, limit: int = 65536, run_id: str | None = None
    ) -> TaskLogChunk:
        """A window of the task's log from byte ``offset`` (``-1``: its tail); continue
        from the chunk's ``next_offset``. ``run_id``: that run's log (an earlier, kept run's
        too)."""
        return self._execute(calls.log_call(task_id, offset, limit, run_id))

    def stream_task(self, task_id: str, poll_interval: float = 0.5) -> TaskStatus:
        """Wait for the task's current run to end; answers its final status."""
        return self._execute(calls.stream_call(task_id, poll_interval))

    def get_task_graph(self, task_id: str) -> TaskGraph:
        """The lineage graph (upstream and downstream, transitively) around ``task_id``."""
        return self._execute(calls.graph_call(task_id))

    def get_task_context(self, task_id: str) -> TaskContext:
        """The task's records, paths and lineage relations in one answer."""
        return self._execute(calls.context_call(task_id))

    def cancel(self, task_id: str) -> bool:
        """Cancel the task's active run; False when it had none."""
        return self._execute(calls.cancel_call(task_id))

    def delete_tasks(self, task_ids: list[str]) -> list[str]:
        """Delete finished tasks; answers the ids that were deleted."""
        return self._execute(calls.delete_call(task_ids))

    def stream(self, task_id: str, poll_interval: float = 0.5) -> Iterator[StreamEvent]:
        """Progress, log and result events of the task until its run ends; reconnects with
        Last-Event-ID if cut off. The last event is a :class:`ResultEvent`."""
        parser = SSEParser()
        body = calls.stream_call(task_id, poll_interval).body(self.target)
        for _ in range(MAX_RESUMES):
            headers = {"last-event-id": parser.last_id} if parser.last_id else {}
            try:
                with self._http.stream(
                    "POST", "/jobs/stream_task/events", json=body, headers=headers
                ) as reply:
                    if reply.status_code != 200:
                        reply.read()
                        checked_json(reply)
                    for line in reply.iter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                            if isinstance(event, ResultEvent):
                                return
            except httpx.TransportError as exc:
                if parser.last_id is None:
                    raise calls.unreachable(self.url, exc) from exc
        raise ServerUnreachable(self.url, "stream kept breaking off")
