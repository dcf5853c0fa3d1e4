"""Prometheus metrics at ``GET /metrics`` (the Prometheus text format), admin token only.

What is exported, each computed where it is cheapest:

* ``runyard_tasks{task_type,state}`` — statuses in the repository index, counted per
  bucket at scrape time (no file is read);
* ``runyard_queue_depth`` — tasks waiting for a worker slot (``queued`` in the index: the
  queued statuses are the queue), ``runyard_supervisor_active_runs`` — queued plus running
  runs the supervisor tracks;
* ``runyard_task_run_duration_seconds{task}`` — a histogram per task definition, observed
  once per run when the repository sees its status turn terminal;
* ``runyard_sync_outbox_depth`` — finished tasks continuous sync has yet to push;
* ``runyard_agent_runs{state}`` — agent runs by state (read from the run store at scrape);
* ``runyard_sse_clients{stream}`` — open Server-Sent-Event streams (``task``: the Job API's
  ``/events``, ``run``: an agent run's events);
* ``runyard_http_request_duration_seconds{method,route,status}`` — request latency by route
  template (``/jobs/submit``, ``/api/v1/runs/{run_id}``), never the raw path, so the label
  set stays bounded; a request that matched no route is ``<unmatched>``.

Each app has its own registry (no process-wide state), so several servers or tests in one
process do not collide::

    metrics = install_metrics(app, services)   # the route, the middleware, the observers
    metrics.attach(); ...; metrics.detach()     # in the app's lifespan
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runyard.api.services import Services
from runyard.api.sse import current_gauge
from runyard.sync.outbox import outbox_depth
from runyard.workspace.identity import parse_task_id

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60)
SEEN_RUNS = 50_000  # run ids remembered so a run's duration is observed once
AGENT_PAGE = 500
UNMATCHED = "<unmatched>"


class Metrics:
    """The registry of one server and the instruments the server's parts update."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.registry = CollectorRegistry(auto_describe=True)
        self.durations = Histogram(
            "runyard_task_run_duration_seconds",
            "Run time (started to finished) of task runs that ended, per task definition",
            ["task"], buckets=DURATION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.sse_clients = Gauge(
            "runyard_sse_clients", "Open Server-Sent-Event streams", ["stream"],
            registry=self.registry,
        )  # fmt: skip
        for kind in ("task", "run"):
            self.sse_clients.labels(stream=kind)  # exported as 0 before the first stream
        self.latency = Histogram(
            "runyard_http_request_duration_seconds",
            "HTTP request latency by route template (streams: until the stream ends)",
            ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.registry.register(StateCollector(services))
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._unsubscribe: Callable[[], None] | None = None

    def attach(self) -> None:
        """Start observing run durations from the repository's change feed."""
        self._unsubscribe = self.services.repository.subscribe(self._on_change)

    def detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _on_change(self, task_id: str, file_name: str) -> None:
        if file_name != "status.json":
            return
        status = self.services.repository.peek(task_id)
        if status is None or not status.terminal or status.run_id in self._seen:
            return
        self._seen[status.run_id] = None
        if len(self._seen) > SEEN_RUNS:
            self._seen.popitem(last=False)
        seconds = _seconds_between(status.started_at, status.finished_at)
        if seconds is not None:
            self.durations.labels(task=parse_task_id(task_id).task).observe(seconds)


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None  # cancelled while queued, or never started: no run time to observe
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None
    return max(0.0, seconds)


class StateCollector(Collector):
    """Counts read at scrape time: tasks by type and state, queue, agent runs by state."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterable[Metric]:
        counts = self.services.repository.counts()
        tasks = GaugeMetricFamily(
            "runyard_tasks", "Tasks with a status, by task type and state", None,
            ["task_type", "state"],
        )  # fmt: skip
        for (task_type, state), count in sorted(counts.items()):
            tasks.add_metric([task_type, state], count)
        yield tasks
        queued = sum(n for (_, state), n in counts.items() if state == "queued")
        yield GaugeMetricFamily("runyard_queue_depth", "Tasks waiting for a worker slot", queued)
        yield GaugeMetricFamily(
            "runyard_supervisor_active_runs",
            "Queued plus running task runs the supervisor tracks",
            self.services.supervisor.active_count(),
        )
        yield GaugeMetricFamily(
            "runyard_sync_outbox_depth",
            "Finished tasks waiting to be pushed by continuous sync",
            outbox_depth(self.services.workspace),
        )
        runs = GaugeMetricFamily("runyard_agent_runs", "Agent runs by state", None, ["state"])
        for state, count in sorted(agent_run_counts(self.services).items()):
            runs.add_metric([state], count)
        yield runs


def agent_run_counts(services: Services) -> dict[str, int]:
    """Agent runs by state, every state present (zero when none)."""
    counts = dict.fromkeys(("queued", "running", "succeeded", "failed", "cancelled"), 0)
    if services.agents is None:
        return counts
    store = services.agents.store
    cursor: str | None = None
    while True:
        page = store.list_runs(None, AGENT_PAGE, cursor)
        for run in page.items:
            state = str(getattr(run.state, "value", run.state))
            counts[state] = counts.get(state, 0) + 1
        cursor = page.next_cursor
        if cursor is None:
            return counts


class RequestMetrics:
    """ASGI middleware: latency by route template, and the metrics context of the request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = current_gauge.set(self.metrics.sse_clients)
        started = time.perf_counter()
        status = [500]

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            current_gauge.reset(token)
            self.metrics.latency.labels(
                method=scope["method"], route=route_label(scope), status=str(status[0])
            ).observe(time.perf_counter() - started)


def route_label(scope: Scope) -> str:
    """The template of the route that answered (set by the router), never the raw path.

    A route of an included router knows only its own part of the path; FastAPI keeps the
    prefixed template in its per-request context, which is preferred when present."""
    context = scope.get("fastapi", {}).get("effective_route_context")
    path = getattr(context, "path_format", None)
    if not isinstance(path, str):
        path = getattr(scope.get("route"), "path", None)
    if not isinstance(path, str):
        return UNMATCHED
    return path or "/"


def install_metrics(app: Any, services: Services) -> Metrics:
    """Add ``GET /metrics`` and the latency middleware (outermost: it times refusals too).

    Call it last in app construction, after the other middleware."""
    metrics = Metrics(services)

    async def scrape() -> Response:
        body = await run_in_threadpool(metrics.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/metrics", scrape, methods=["GET"], include_in_schema=False)
    app.router.routes.insert(0, app.router.routes.pop())  # ahead of the Studio's mount at /
    app.add_middleware(RequestMetrics, metrics=metrics)
    return metrics
