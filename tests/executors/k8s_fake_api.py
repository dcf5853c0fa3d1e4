"""A small in-memory Kubernetes API server on 127.0.0.1 for the executor tests.

It speaks just the REST paths the Kubernetes executor uses — Jobs (create, read, patch,
delete, list), ConfigMaps, Secrets and NetworkPolicies (create, list, delete), Pods (list,
delete) and the pod log (plain and ``follow=true``, chunked) — and plays a crude job
controller: resuming a Job creates its pod. Tests advance the rest themselves (start the
container, write log bytes, terminate it with an exit code, fail the Job, ...), or let the
test kubelet (k8s_kubelet.py) run the pods. It is a stand-in for a cluster, not a model of
one: no admission, no validation, no scheduling.

Objects carry a uid and a ``resourceVersion`` from one counter that grows with every
change; every change is also an event (ADDED, MODIFIED, DELETED) in a bounded history, which
``?watch=true`` streams as chunked JSON lines from a list's ``metadata.resourceVersion``
(label selector, ``timeoutSeconds`` and BOOKMARK events honoured). A watch from a version
the history no longer covers gets an ERROR event with a 410 Status (``gone_as_http``: an
HTTP 410 instead); ``expire_watch_history`` forgets the history now and ``drop_watches``
cuts every open stream. ``request_counts`` counts requests by verb and kind. Deletion
follows ``propagationPolicy``: ``Background`` (the default here) removes the object at once
and its dependents later; ``Foreground`` marks it (``deletionTimestamp``, the
``foregroundDeletion`` finalizer) and removes it only after its dependents; ``Orphan``
keeps the dependents. "Later" is ``gc_delay`` seconds on a timer (0: at once, inside the
request), so tests can see what a real garbage collector lets them see; while
``gc_gate`` is clear, a collection that is due waits for it to be set again (a test that
checks what lingers is then not at the mercy of a slow machine). A pod deletion's
``gracePeriodSeconds`` is kept in ``pod_grace`` for the kubelet.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import socket
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

ROUTES = [
    (re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$"), "Job"),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?$"), "ConfigMap"),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/secrets(?:/([^/]+))?$"), "Secret"),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$"), "Pod"),
    (
        re.compile(r"^/apis/networking.k8s.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$"),
        "NetworkPolicy",
    ),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/events(?:/([^/]+))?$"), "Event"),
]
LOG_ROUTE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")
API_VERSIONS = {"Job": "batch/v1", "NetworkPolicy": "networking.k8s.io/v1"}
HISTORY = 1000  # events kept for watches; older versions answer 410 Gone


def timestamp(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


class ApiFailure(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, sep, value = term.partition("=")
        if sep and labels.get(key) != value:
            return False
        if not sep and key not in labels:
            return False
    return True


@dataclass(frozen=True)
class WatchEvent:
    version: int
    type: str
    kind: str
    namespace: str
    object: dict[str, Any]


@dataclass
class Injected:
    """A failure answered to the next ``times`` requests matching ``method`` and ``path``;
    with ``apply`` the request is carried out first (its answer is what gets lost)."""

    method: str
    path: str
    code: int
    times: int = 1
    retry_after: str | None = None
    apply: bool = False


def field_matches(obj: dict[str, Any], selector: str) -> bool:
    """``a.b=value`` terms over the object's fields (events' ``involvedObject.name``)."""
    for term in filter(None, selector.split(",")):
        path, _, value = term.partition("=")
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != value:
            return False
    return True


class FakeKubernetes:
    """The cluster state, the request journal, and the controls tests use to advance it.
    ``inject`` makes chosen requests fail (409/410/429/503, with or without doing them)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.injected: list[Injected] = []
        self.requests: list[Request] = []
        self.logs: dict[str, bytearray] = {}
        self.log_requests = 0
        self.break_next_stream_after: int | None = None
        self.version = 0
        self.history: deque[WatchEvent] = deque(maxlen=HISTORY)
        self.history_floor = 0  # a watch from an older version is answered 410 Gone
        self.gone_as_http = False
        self.watch_epoch = 0  # drop_watches moves it: streams of an older epoch are cut
        self.bookmark_seconds = 0.5
        self.counts: Counter[tuple[str, str]] = Counter()
        self.gc_delay = 0.0
        self.gc_gate = threading.Event()
        self.gc_gate.set()
        self.pod_grace: dict[str, int | None] = {}
        self.pod_names: dict[str, str] = {}  # Job name -> its newest pod's name
        self.owned: dict[str, dict[tuple[str, str, str], None]] = {}  # owner uid -> dependents
        self.cond = threading.Condition()
        self.closed = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.fake = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeKubernetes:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.gc_gate.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    # --- the REST side -------------------------------------------------------------------
    def handle(self, method: str, kind: str, ns: str, name: str | None, query: dict[str, str],
               body: Any) -> dict[str, Any]:
        with self.cond:
            if name is None and method == "POST":
                return self._create(kind, ns, body)
            if name is None and method == "GET":
                items = [copy.deepcopy(o) for (k, n, _), o in sorted(self.objects.items())
                         if k == kind and n == ns
                         and matches(o["metadata"].get("labels") or {},
                                     query.get("labelSelector", ""))
                         and field_matches(o, query.get("fieldSelector", ""))]
                return {"kind": f"{kind}List", "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(self.version)}, "items": items}
            current = self.objects.get((kind, ns, name or ""))
            if current is None:
                raise ApiFailure(404, "NotFound", f'{kind.lower()}s "{name}" not found')
            if method == "GET":
                return copy.deepcopy(current)
            if method == "PATCH":
                return self._patch(current, body)
            if method == "DELETE":
                if kind == "Pod":
                    grace = query.get("gracePeriodSeconds")
                    self.pod_grace[name or ""] = None if grace is None else int(grace)
                self._propagate(kind, ns, current, query.get("propagationPolicy", "Background"))
                return {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        raise ApiFailure(405, "MethodNotAllowed", f"{method} is not supported here")

    def _create(self, kind: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if (kind, ns, name) in self.objects:
            raise ApiFailure(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
        stored = copy.deepcopy(body)
        stored["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=timestamp())
        self.objects[(kind, ns, name)] = stored
        self.touch(stored, "ADDED", kind)
        if kind == "Job" and not stored["spec"].get("suspend"):
            self._create_pod(stored)
        return copy.deepcopy(stored)

    def _patch(self, job: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        was_suspended = job["spec"].get("suspend")
        merge(job, patch)
        self.touch(job)
        if was_suspended and not job["spec"].get("suspend"):
            self._create_pod(job)
        return copy.deepcopy(job)

    def touch(self, obj: dict[str, Any], event: str = "MODIFIED", kind: str | None = None) -> None:
        """A change: the object's resourceVersion moves past every earlier one, and
        watches see it as ``event``."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        kind = kind or self._kind_of(obj)
        namespace = obj["metadata"].get("namespace", "default")
        for ref in obj["metadata"].get("ownerReferences") or []:
            if event != "DELETED":
                self.owned.setdefault(ref["uid"], {})[(kind, namespace, obj["metadata"]["name"])] = None
        if len(self.history) == self.history.maxlen:
            self.history_floor = self.history[0].version
        self.history.append(WatchEvent(self.version, event, kind, obj["metadata"].get(
            "namespace", "default"), copy.deepcopy(obj)))
        self.cond.notify_all()

    def _kind_of(self, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        if (obj.get("kind"), meta.get("namespace", "default"), meta["name"]) in self.objects:
            return str(obj["kind"])
        for (kind, _, _), other in self.objects.items():
            if other is obj:
                return kind
        return str(obj.get("kind") or "")

    def _removed(self, kind: str, obj: dict[str, Any]) -> None:
        """``obj`` has left the store: watches see it DELETED."""
        self.touch(obj, "DELETED", kind)

    def _propagate(self, kind: str, ns: str, obj: dict[str, Any], policy: str) -> None:
        if policy == "Foreground" and self._dependents(obj["metadata"]["uid"]):
            obj["metadata"].setdefault("deletionTimestamp", timestamp())
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self.touch(obj)
            self._later(lambda: self._delete(kind, ns, obj))
            return
        if self.objects.pop((kind, ns, obj["metadata"]["name"]), None) is not None:
            self._removed(kind, obj)
        if policy != "Orphan":
            self._later(lambda: self._delete(kind, ns, obj))

    def _later(self, work: Any) -> None:
        """The garbage collector's work: at once, or ``gc_delay`` seconds from now."""
        if self.gc_delay <= 0:
            work()
            return

        def run() -> None:
            self.gc_gate.wait()
            with self.cond:
                if not self.closed:
                    work()

        timer = threading.Timer(self.gc_delay, run)
        timer.daemon = True
        timer.start()

    def _dependents(self, uid: str) -> list[tuple[tuple[str, str, str], dict[str, Any]]]:
        found = []  # from the objects ever seen owned by ``uid``, not a scan of every object
        for key in self.owned.get(uid, {}):
            other = self.objects.get(key)
            refs = [] if other is None else other["metadata"].get("ownerReferences") or []
            if other is not None and any(ref["uid"] == uid for ref in refs):
                found.append((key, other))
        return found

    def _delete(self, kind: str, ns: str, obj: dict[str, Any]) -> None:
        key = (kind, ns, obj["metadata"]["name"])
        if self.objects.get(key) is obj:
            del self.objects[key]
            self._removed(kind, obj)
        for (dep_kind, dep_ns, _), other in self._dependents(obj["metadata"]["uid"]):
            self._delete(dep_kind, dep_ns, other)
        if key not in self.objects:
            self.owned.pop(obj["metadata"]["uid"], None)
        self.cond.notify_all()

    def take_injected(self, method: str, path: str) -> Injected | None:
        with self.cond:
            for failure in self.injected:
                if failure.method == method and failure.path in path and failure.times > 0:
                    failure.times -= 1
                    return failure
        return None

    def inject(self, method: str, path: str, code: int, times: int = 1,
               retry_after: str | None = None, apply: bool = False) -> Injected:
        failure = Injected(method, path, code, times, retry_after, apply)
        with self.cond:
            self.injected.append(failure)
        return failure

    def _create_pod(self, job: dict[str, Any]) -> None:
        meta, template = job["metadata"], job["spec"]["template"]
        name = f"{meta['name']}-{secrets.token_hex(3)[:5]}"
        labels = {**template["metadata"].get("labels", {}), "job-name": meta["name"]}
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                 "uid": meta["uid"], "controller": True}
        status = {"name": "worker", "image": template["spec"]["containers"][0]["image"],
                  "imageID": "", "ready": False, "restartCount": 0,
                  "state": {"waiting": {"reason": "ContainerCreating"}}}
        self.objects[("Pod", meta["namespace"], name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                         "uid": str(uuid.uuid4()), "creationTimestamp": timestamp(),
                         "ownerReferences": [owner]},
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending", "containerStatuses": [status]},
        }
        self.touch(self.objects[("Pod", meta["namespace"], name)], "ADDED", "Pod")
        self.logs[name] = bytearray()
        self.pod_names[meta["name"]] = name

    # --- test controls -------------------------------------------------------------------
    def job(self, name: str, ns: str = "default") -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self.objects[("Job", ns, name)])

    def kinds_named(self, name: str) -> set[str]:
        with self.cond:
            return {kind for kind, _, obj_name in self.objects if obj_name == name}

    def pod_of(self, job_name: str) -> dict[str, Any]:
        with self.cond:
            known = self.objects.get(("Pod", "default", self.pod_names.get(job_name, "")))
            if known is not None and known["metadata"]["labels"].get("job-name") == job_name:
                return known  # without a scan of every object: thousands of runs in a bench
            for (kind, _, _), obj in self.objects.items():
                if kind == "Pod" and obj["metadata"]["labels"].get("job-name") == job_name:
                    return obj
        raise KeyError(job_name)

    def _container(self, job_name: str) -> dict[str, Any]:
        return self.pod_of(job_name)["status"]["containerStatuses"][0]

    def start_container(self, job_name: str) -> None:
        with self.cond:
            self.pod_of(job_name)["status"]["phase"] = "Running"
            self._container(job_name)["state"] = {"running": {"startedAt": timestamp()}}
            self.touch(self.pod_of(job_name), kind="Pod")

    def set_waiting(self, job_name: str, reason: str, message: str, age_seconds: int = 0) -> None:
        with self.cond:
            pod = self.pod_of(job_name)
            created = datetime.fromtimestamp(datetime.now(UTC).timestamp() - age_seconds, UTC)
            pod["metadata"]["creationTimestamp"] = timestamp(created)
            self._container(job_name)["state"] = {"waiting": {"reason": reason, "message": message}}
            self.touch(pod, kind="Pod")

    def set_unschedulable(self, job_name: str, message: str, age_seconds: int = 0) -> None:
        """What the scheduler reports for a pod no node can take: no container yet."""
        with self.cond:
            pod = self.pod_of(job_name)
            created = datetime.fromtimestamp(datetime.now(UTC).timestamp() - age_seconds, UTC)
            pod["metadata"]["creationTimestamp"] = timestamp(created)
            pod["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": message}]}
            self.touch(pod, kind="Pod")

    def add_event(self, about: str, reason: str, message: str, kind: str = "Job") -> None:
        with self.cond:
            name = f"{about}.{secrets.token_hex(4)}"
            self.objects[("Event", "default", name)] = {
                "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": reason,
                "message": message, "lastTimestamp": timestamp(),
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": kind, "name": about, "namespace": "default"},
            }
            self.touch(self.objects[("Event", "default", name)], "ADDED", "Event")

    def age_job(self, job_name: str, seconds: int) -> None:
        with self.cond:
            job = self.objects[("Job", "default", job_name)]
            created = datetime.fromtimestamp(datetime.now(UTC).timestamp() - seconds, UTC)
            job["metadata"]["creationTimestamp"] = timestamp(created)
            self.touch(job, kind="Job")

    def write_log(self, job_name: str, data: bytes) -> None:
        with self.cond:
            self.logs[self.pod_of(job_name)["metadata"]["name"]] += data
            self.cond.notify_all()

    def terminate(
        self, job_name: str, exit_code: int, reason: str | None = None, pod_event: bool = True
    ) -> None:
        """The container exits with ``exit_code`` and the Job completes or fails.
        ``pod_event=False``: watches see the Job's change but not yet the pod's (each kind
        has its own stream), while reads of the pod find it ended."""
        with self.cond:
            pod, job = self.pod_of(job_name), self.objects[("Job", "default", job_name)]
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            reason = reason or ("Completed" if exit_code == 0 else "Error")
            self._container(job_name)["state"] = {
                "terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": timestamp()}
            }
            if exit_code == 0:
                condition = {"type": "Complete", "status": "True"}
                job["status"] = {"succeeded": 1, "conditions": [condition]}
            else:
                condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                             "message": "Job has reached the specified backoff limit"}
                job["status"] = {"failed": 1, "conditions": [condition]}
            if pod_event:
                self.touch(pod, kind="Pod")
            self.touch(job, kind="Job")

    def fail_job(self, job_name: str, reason: str, message: str) -> None:
        """What the job controller does at activeDeadlineSeconds: Failed, pods deleted."""
        with self.cond:
            job = self.objects[("Job", "default", job_name)]
            condition = {"type": "Failed", "status": "True", "reason": reason, "message": message}
            job["status"] = {"failed": 1, "conditions": [condition]}
            self.touch(job, kind="Job")
            pod = self.pod_of(job_name)
            del self.objects[("Pod", "default", pod["metadata"]["name"])]
            self._removed("Pod", pod)

    def add(self, kind: str, body: dict[str, Any], created: datetime, ns: str = "default") -> None:
        with self.cond:
            stored = copy.deepcopy(body)
            stored["metadata"].update(namespace=ns, uid=str(uuid.uuid4()),
                                      creationTimestamp=timestamp(created))
            self.objects[(kind, ns, stored["metadata"]["name"])] = stored
            self.touch(stored, "ADDED", kind)

    def requests_of(self, method: str, kind_path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and kind_path in r.path]

    def request_counts(self) -> Counter[tuple[str, str]]:
        """Requests so far by (verb, kind): ``("watch", "Job")``, ``("get", "Pod/log")``."""
        with self.cond:
            return Counter(self.counts)

    def count(self, method: str, path: str, query: dict[str, str]) -> None:
        log = LOG_ROUTE.match(path)
        found = [(pattern.match(path), kind) for pattern, kind in ROUTES]
        named, kind = next(((m.group(2), k) for m, k in found if m), (None, "?"))
        if log:
            named, kind = log.group(2), "Pod/log"
        verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
        if method == "GET":
            verb = "get" if named else ("watch" if query.get("watch") in ("true", "1") else "list")
        with self.cond:
            self.counts[(verb, kind)] += 1

    # --- watches -------------------------------------------------------------------------
    def expire_watch_history(self) -> None:
        """Forget every event so far, as a compacted etcd does: a watch from an earlier
        version (open streams included) is answered 410 Gone."""
        with self.cond:
            self.history.clear()
            self.history_floor = self.version
            self.cond.notify_all()

    def drop_watches(self) -> None:
        """Cut every open watch stream, as a lost connection does (no final chunk)."""
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    def watch_events(
        self, kind: str, ns: str, query: dict[str, str]
    ) -> Any:
        """Yield the lines of a watch: events after ``resourceVersion`` matching the label
        selector, BOOKMARKs when asked, until ``timeoutSeconds``; an ERROR with a 410 Status
        when the history does not reach back that far; ``"cut"`` when the stream must break."""
        position = int(query.get("resourceVersion") or 0)
        selector = query.get("labelSelector", "")
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        with self.cond:
            epoch = self.watch_epoch
        while True:
            with self.cond:
                found, position, end = self._next_events(kind, ns, selector, position, epoch)
                if not found and end is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        end = "timeout"
                    else:
                        self.cond.wait(min(left, self.bookmark_seconds))
                        found, position, end = self._next_events(
                            kind, ns, selector, position, epoch)
                        if not found and end is None and bookmarks:
                            found = [self._bookmark(kind, position)]
            yield from found
            if end == "timeout" and bookmarks:
                yield self._bookmark(kind, position)
            if end == "gone":
                yield {"type": "ERROR", "object": ApiFailure(
                    410, "Expired", f"too old resource version: {position}").status()}
            if end is not None:
                if end == "cut":
                    yield "cut"
                return

    def _next_events(
        self, kind: str, ns: str, selector: str, position: int, epoch: int
    ) -> tuple[list[Any], int, Literal["gone", "cut", "timeout"] | None]:
        if self.closed or epoch != self.watch_epoch:
            return [], position, "cut"
        if position < self.history_floor:
            return [], position, "gone"
        newer = []  # read from the newest back: a wake costs the events since, not the history
        for event in reversed(self.history):
            if event.version <= position:
                break
            newer.append(event)
        events = [
            {"type": e.type, "object": copy.deepcopy(e.object)} for e in reversed(newer)
            if e.kind == kind and e.namespace == ns
            and matches(e.object["metadata"].get("labels") or {}, selector)
        ]
        return events, max(position, self.version), None

    def _bookmark(self, kind: str, version: int) -> dict[str, Any]:
        return {"type": "BOOKMARK", "object": {
            "kind": kind, "apiVersion": API_VERSIONS.get(kind, "v1"),
            "metadata": {"resourceVersion": str(version)}}}

    def watch_precheck(self, query: dict[str, str]) -> None:
        with self.cond:
            if self.gone_as_http and int(query.get("resourceVersion") or 0) < self.history_floor:
                raise ApiFailure(410, "Expired", "too old resource version")

    # --- pod log streaming ---------------------------------------------------------------
    def log_chunks(self, pod_name: str, follow: bool) -> Any:
        """Yield log bytes as they arrive; None at the end marks a broken stream."""
        with self.cond:
            self.log_requests += 1
            limit, self.break_next_stream_after = self.break_next_stream_after, None
        sent = 0
        while True:
            with self.cond:
                data = bytes(self.logs.get(pod_name, b"")[sent:])
                while not data and follow and self._running(pod_name) and not self.closed:
                    self.cond.wait(0.5)
                    data = bytes(self.logs.get(pod_name, b"")[sent:])
            if limit is not None and sent + len(data) >= limit:
                yield data[: limit - sent]
                yield None
                return
            if data:
                sent += len(data)
                yield data
                continue
            return

    def _running(self, pod_name: str) -> bool:
        pod = self.objects.get(("Pod", "default", pod_name))
        return pod is not None and "running" in pod["status"]["containerStatuses"][0]["state"]

    def log_precheck(self, ns: str, pod_name: str) -> None:
        with self.cond:
            pod = self.objects.get(("Pod", ns, pod_name))
            if pod is None:
                raise ApiFailure(404, "NotFound", f'pods "{pod_name}" not found')
            waiting = pod["status"]["containerStatuses"][0]["state"].get("waiting")
            if waiting is not None:
                raise ApiFailure(400, "BadRequest", f'container "worker" in pod "{pod_name}" '
                                 f"is waiting to start: {waiting.get('reason')}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    def log_message(self, format: str, *args: Any) -> None:
        return

    @property
    def fake(self) -> FakeKubernetes:
        return self.server.fake  # type: ignore[attr-defined]

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.requests.append(Request(method, parts.path, query, body, headers))
        self.fake.count(method, parts.path, query)
        failure = self.fake.take_injected(method, parts.path)
        if failure is not None and not failure.apply:
            return self._fail(failure)
        try:
            log = LOG_ROUTE.match(parts.path)
            if log and method == "GET":
                self.fake.log_precheck(log.group(1), log.group(2))
                return self._stream_log(log.group(2), query.get("follow") == "true")
            for pattern, kind in ROUTES:
                found = pattern.match(parts.path)
                if found and method == "GET" and not found.group(2) and query.get("watch"):
                    self.fake.watch_precheck(query)
                    return self._stream_watch(kind, found.group(1), query)
                if found:
                    answer = self.fake.handle(method, kind, found.group(1), found.group(2),
                                              query, body)
                    if failure is not None:  # done, but the answer is lost
                        return self._fail(failure)
                    return self._json(200 if method != "POST" else 201, answer)
            raise ApiFailure(404, "NotFound", f"no route for {parts.path}")
        except ApiFailure as failure:
            self._json(failure.code, failure.status())

    def _fail(self, failure: Injected) -> None:
        reasons = {409: "AlreadyExists", 410: "Expired", 429: "TooManyRequests"}
        status = ApiFailure(failure.code, reasons.get(failure.code, "ServiceUnavailable"),
                            f"injected {failure.code}").status()
        extra = {} if failure.retry_after is None else {"Retry-After": failure.retry_after}
        self._json(failure.code, status, extra)

    def _json(self, code: int, payload: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream_watch(self, kind: str, ns: str, query: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in self.fake.watch_events(kind, ns, query):
                if event == "cut":
                    self._cut()
                    return
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away
            self.close_connection = True

    def _cut(self) -> None:
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _stream_log(self, pod_name: str, follow: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in self.fake.log_chunks(pod_name, follow):
            if chunk is None:  # a broken stream: no final chunk, connection cut
                self._cut()
                return
            if chunk:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def handle_one_request(self) -> None:
        # a client that hangs up before its answer is written is the client's business; left
        # to socketserver, it printed a BrokenPipeError traceback in the middle of a test run
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")
