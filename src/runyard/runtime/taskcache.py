"""Cached task results: a submit whose cache key matches an earlier success runs nothing.

    cache = TaskCache(workspace, registry)
    plan = cache.plan("etl", inputs, submitted_by, CacheRequest(cache=True))
    if plan.hit is not None:
        return plan.hit                      # the earlier task's handle, ``cached: true``
    status = create_task(..., status_fields=plan.status_fields())
    cache.noted(plan, status.task_id)

A task is cacheable when its class says ``cache = True`` or its submit passes ``cache:
true``; ``cache: false`` forces a run (whose success then serves later submits: a refresh).
The key is the sha256 of the canonical JSON of the task name, its validated inputs without
``task_name`` (``source_tasks`` stays: the upstreams it names), the sha256 of every artifact
of every upstream task in ``source_tasks`` (``depends_on`` is merged there), taken from the
upstream's ``metadata.json``, and the version of the distribution that registered the task
(runyard's own for built-ins). An upstream without metadata (not succeeded yet) leaves the
key unknown: such a submit is not looked up. When it waits for that upstream
(``depends_on``), its key is computed when it is released from waiting, so its success
serves later submits; otherwise it records no key.

The key travels in the run's ``status.json`` (written by the server) into its
``metadata.json`` on success (by the worker, or by the record keeper of a sandboxed run,
which never takes it from the sandbox), so gc, sync and backups carry it with the task.
The hints under ``<workspace>/.taskcache`` (the last few task ids submitted with a key, per
key and submitter) only say where to look: a candidate serves a submit only when, read
again now, it is visible to the submitter (an admin's submit: an admin's task; a run's: a
task of its session), its status is ``succeeded`` with this key, its metadata carries this
key, this task name and these very inputs, and it finished within the expiry. A deleted,
collected, replaced or failed task never serves one, nor one received by sync (its status
says ``synced_from``): its records are what a peer sent, not what ran here.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from runyard.runtime.launch import TaskHandle
from runyard.runtime.submitters import Submitter, own_status, session_of
from runyard.tasks.registry import RegisteredTask, TaskRegistry
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.identity import is_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus

CACHE_DIR = ".taskcache"
KEY_FORMAT = 1  # part of every key: a change of what goes into one never matches an old one
HINTS_KEPT = 8  # task ids remembered per key and submitter, newest first
ADMIN_OWNER = "admin"


@dataclass(frozen=True)
class CacheRequest:
    """A submit's caching choices: ``cache`` None takes the task class's ``cache``;
    ``expiry_seconds`` None takes its ``cache_expiry_seconds`` (None: unlimited)."""

    cache: bool | None = None
    expiry_seconds: float | None = None


@dataclass(frozen=True)
class CachePlan:
    """What a submit does about the cache: ``hit`` answers it; else, when ``record``, the
    new run records ``key`` (None: not known yet) for later submits."""

    record: bool
    key: str | None = None
    owner: str = ADMIN_OWNER
    hit: TaskHandle | None = None

    def status_fields(self) -> dict[str, Any]:
        """The fields of the new run's ``queued`` status that carry the cache's part."""
        if not self.record:
            return {}
        return {"cache": True, "cache_key": self.key} if self.key else {"cache": True}


class TaskCache:
    """Key computation, hint keeping and verified look-ups for one workspace."""

    def __init__(self, workspace: Workspace, registry: TaskRegistry) -> None:
        self.workspace = workspace
        self.registry = registry
        self._hints = CacheHints(workspace.root / CACHE_DIR)

    def plan(
        self, task: str, inputs: dict[str, Any], submitted_by: Submitter, request: CacheRequest
    ) -> CachePlan:
        """Whether this submit is answered from the cache, or what its run records."""
        registered = self.registry.get(task)
        task_cls = registered.task_cls
        class_cache = bool(getattr(task_cls, "cache", False))
        lookup = class_cache if request.cache is None else request.cache
        if not (lookup or class_cache):
            return CachePlan(record=False)
        config = self.registry.validate_inputs(task, inputs).model_dump(mode="json")
        key = cache_key(self.workspace, registered, config)
        owner = owner_of(submitted_by)
        plan = CachePlan(record=True, key=key, owner=owner)
        if not lookup or key is None:
            return plan
        expiry = request.expiry_seconds
        if expiry is None:
            expiry = getattr(task_cls, "cache_expiry_seconds", None)
        found = self.find(task, key, config, owner, expiry)
        if found is None:
            return plan
        handle = TaskHandle(task_id=found.task_id, run_id=found.run_id, task=task, cached=True)
        return CachePlan(record=False, key=key, owner=owner, hit=handle)

    def noted(self, plan: CachePlan, task_id: str) -> None:
        """Remember that ``task_id`` was made to record ``plan.key``."""
        if plan.record and plan.key is not None:
            self._hints.add(plan.key, plan.owner, task_id)

    def key_at_release(self, status: TaskStatus) -> dict[str, Any]:
        """The status fields of a run released from waiting: its key, now that its
        upstreams succeeded (and the hint for it); nothing when it records none."""
        if not status.cache or status.cache_key:
            return {}
        try:
            registered = self.registry.get(status.task_name)
        except ValueError:  # uninstalled meanwhile: its launch says so
            return {}
        key = cache_key(self.workspace, registered, status.config)
        if key is None:
            return {}
        session = session_of(self.workspace, status.task_id)
        owner = ADMIN_OWNER if session is None else session_owner(session)
        self._hints.add(key, owner, status.task_id)
        return {"cache_key": key}

    def find(
        self,
        task: str,
        key: str,
        config: dict[str, Any],
        owner: str,
        expiry_seconds: float | None,
    ) -> TaskStatus | None:
        """The newest hinted task that may serve this submit (see the module docstring)."""
        for task_id in self._hints.task_ids(key, owner):
            status = self._serving(task_id, task, key, config, owner, expiry_seconds)
            if status is not None:
                return status
        return None

    def _serving(
        self,
        task_id: str,
        task: str,
        key: str,
        config: dict[str, Any],
        owner: str,
        expiry_seconds: float | None,
    ) -> TaskStatus | None:
        session = session_of(self.workspace, task_id)
        if (ADMIN_OWNER if session is None else session_owner(session)) != owner:
            return None  # another submitter's task: never served across that line
        status = own_status(self.workspace, task_id, self.workspace.read_status(task_id))
        if status is None or status.state is not TaskState.SUCCEEDED:
            return None
        if status.cache_key != key or status.task_name != task:
            return None
        if (status.model_extra or {}).get("synced_from") is not None:
            return None  # a result another server made: its records are the peer's word
        metadata = self.workspace.read_metadata(task_id)
        if metadata is None or metadata.cache_key != key or metadata.reg_name != task:
            return None
        if _inputs_part(metadata.input_params) != _inputs_part(config):
            return None
        if expiry_seconds is not None and _age_seconds(status) > expiry_seconds:
            return None
        return status


def cache_key(
    workspace: Workspace, registered: RegisteredTask, config: dict[str, Any]
) -> str | None:
    """The key of a run of ``registered`` with validated inputs ``config``; None while an
    upstream named in its ``source_tasks`` has no metadata (no success to read)."""
    upstreams = upstream_artifacts(workspace, str(config.get("source_tasks") or ""))
    if upstreams is None:
        return None
    document = {
        "format": KEY_FORMAT,
        "task": registered.name,
        "inputs": _inputs_part(config),
        "upstream_artifacts": upstreams,
        "version": plugin_version(registered),
    }
    return hashlib.sha256(canonical_json(document)).hexdigest()


def upstream_artifacts(workspace: Workspace, source_tasks: str) -> dict[str, dict[str, str]] | None:
    """``{upstream id: {artifact name: sha256}}`` from each upstream's metadata; None when
    one has none yet."""
    found: dict[str, dict[str, str]] = {}
    for task_id in (part.strip() for part in source_tasks.split(",")):
        if not task_id:
            continue
        metadata = workspace.read_metadata(task_id) if is_task_id(task_id) else None
        if metadata is None:
            return None
        artifacts = metadata.output_params.get("artifacts")
        found[task_id] = {
            str(name): str(ref.get("sha256", ""))
            for name, ref in (artifacts.items() if isinstance(artifacts, dict) else ())
            if isinstance(ref, dict)
        }
    return found


def plugin_version(registered: RegisteredTask) -> str:
    """``<distribution>==<version>`` of what registered the task, read now (an upgrade
    installed while the server runs changes the keys of the runs after it)."""
    name = registered.definition.plugin or "runyard"
    try:
        return f"{name}=={version(name)}"
    except (PackageNotFoundError, ValueError):
        return f"{name}==unknown"


def canonical_json(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def owner_of(submitted_by: Submitter) -> str:
    """Whose cache a submit reads and fills: the admin's, or its run's session's."""
    if isinstance(submitted_by, dict):
        return session_owner(str(submitted_by.get("session_id", "")))
    return ADMIN_OWNER


def session_owner(session_id: str) -> str:
    return f"session:{session_id}"


def _inputs_part(config: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in config.items() if name != "task_name"}


def _age_seconds(status: TaskStatus) -> float:
    """Seconds since the run finished (an unreadable time counts as too old)."""
    try:
        finished = datetime.fromisoformat(str(status.finished_at))
    except ValueError:
        return float("inf")
    if finished.tzinfo is None:
        finished = finished.replace(tzinfo=UTC)
    return (datetime.now(UTC) - finished).total_seconds()


class CacheHints:
    """``<folder>/<aa>/<hash>.json``: the task ids last made for a key by a submitter.

    Only a hint (see the module docstring): a lost or stale one costs a run, never a wrong
    answer. Written atomically; a concurrent writer in another process may drop an id.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()

    def _path(self, key: str, owner: str) -> Path:
        name = hashlib.sha256(f"{key}\n{owner}".encode()).hexdigest()
        return self.folder / name[:2] / f"{name}.json"

    def task_ids(self, key: str, owner: str) -> list[str]:
        data = read_json_tolerant(self._path(key, owner))
        if data is None or data.get("key") != key or data.get("owner") != owner:
            return []
        ids = data.get("task_ids")
        if not isinstance(ids, list):
            return []
        return [tid for tid in ids[:HINTS_KEPT] if isinstance(tid, str) and is_task_id(tid)]

    def add(self, key: str, owner: str, task_id: str) -> None:
        path = self._path(key, owner)
        with self._lock:
            kept = [tid for tid in self.task_ids(key, owner) if tid != task_id]
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            record = {"key": key, "owner": owner, "task_ids": [task_id, *kept][:HINTS_KEPT]}
            write_json_atomic(path, record, fsync=False)  # a hint: lost in a crash at worst


def with_served(value: Any, served: dict[str, str]) -> Any:
    """``value`` (a submit's inputs, or a part of them) with each planned task id replaced by
    the id of the task that answered it from the cache, also inside a comma-joined
    ``source_tasks``: a pipeline step after a cached one names the task that exists."""
    if not served:
        return value
    if isinstance(value, str):
        return ",".join(served.get(part, part) for part in value.split(","))
    if isinstance(value, dict):
        return {name: with_served(item, served) for name, item in value.items()}
    if isinstance(value, list):
        return [with_served(item, served) for item in value]
    return value
