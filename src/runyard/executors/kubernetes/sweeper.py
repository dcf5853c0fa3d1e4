"""Delete what runyard left in a namespace for runs that are finished or unknown.

Owner references make Kubernetes delete a run's ConfigMap, Secret and NetworkPolicy with
its Job, and ``ttlSecondsAfterFinished`` deletes the Job. The sweeper covers the rest: a
Job left suspended by a launch that died half-way, objects of runs the caller no longer
tracks, clusters without the TTL controller. Everything carrying
``app.kubernetes.io/managed-by=runyard`` whose run id is not active and which is older than
``min_age_seconds`` (so a launch in progress is never touched) is deleted — and only when
it carries this server's ``runyard.dev/instance`` label: another server's objects in the
same namespace are never touched.

    swept = sweep_leftovers(api, "runyard", "ry-1f…", active_run_ids={"run-0193…"})
    sweeper = Sweeper(api, settings); sweeper.start()   # orphans now and periodically

The periodic :func:`sweep_orphans` needs no list of active runs, so it can run before a
restarted server has adopted its runs: it deletes only what is certainly dead — Jobs still
suspended (a launch that died half-way) and owned objects whose Job is gone. Finished Jobs
are left for the server to read (and delete) and for ``ttlSecondsAfterFinished``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.kubernetes.api import KubeApi
from runyard.executors.kubernetes.names import RUN_ID_LABEL, managed_selector
from runyard.executors.kubernetes.status import parse_time
from runyard.kubernetes_settings import KubernetesSettings

SWEPT_KINDS = ("Job", "ConfigMap", "Secret", "NetworkPolicy")
OWNED_KINDS = SWEPT_KINDS[1:]
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Swept:
    kind: str
    name: str
    run_id: str | None


def _is_leftover(
    item: dict[str, Any], active: Collection[str], now: datetime, min_age: float
) -> bool:
    metadata = item.get("metadata") or {}
    if (metadata.get("labels") or {}).get(RUN_ID_LABEL) in active:
        return False
    created = parse_time(metadata.get("creationTimestamp"))
    return created is None or (now - created).total_seconds() >= min_age


def _old(item: dict[str, Any], now: datetime, min_age: float) -> bool:
    created = parse_time((item.get("metadata") or {}).get("creationTimestamp"))
    return created is None or (now - created).total_seconds() >= min_age


def _delete(api: KubeApi, namespace: str, kind: str, item: dict[str, Any]) -> Swept | None:
    metadata = item["metadata"]
    propagation = "Background" if kind == "Job" else None
    if not api.delete(kind, namespace, metadata["name"], propagation=propagation):
        return None
    return Swept(kind, metadata["name"], (metadata.get("labels") or {}).get(RUN_ID_LABEL))


def sweep_orphans(
    api: KubeApi, namespace: str, instance: str, *, min_age_seconds: float,
    now: datetime | None = None,
) -> list[Swept]:
    """Delete this instance's suspended Jobs and owned objects whose Job is gone."""
    moment = now or datetime.now(UTC)
    selector = managed_selector(instance=instance)
    jobs = api.list("Job", namespace, selector)
    doomed = [("Job", job) for job in jobs if (job.get("spec") or {}).get("suspend")]
    living = {j["metadata"].get("uid") for j in jobs} - {None}
    for kind in OWNED_KINDS:
        for item in api.list(kind, namespace, selector):
            owners = {ref.get("uid") for ref in item["metadata"].get("ownerReferences") or []}
            if not owners & living:
                doomed.append((kind, item))
    swept = [
        _delete(api, namespace, kind, item)
        for kind, item in doomed
        if _old(item, moment, min_age_seconds)
    ]
    return [done for done in swept if done is not None]


class Sweeper:
    """Runs :func:`sweep_orphans` at start and every ``sweep_interval_seconds``."""

    def __init__(self, api: KubeApi, settings: KubernetesSettings) -> None:
        self._api = api
        self._settings = settings
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="k8s-sweeper", daemon=True)
        self.rounds = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self._settings.request_timeout_seconds + 1)

    def _loop(self) -> None:
        settings = self._settings
        while not self._stopped.is_set():
            try:
                swept = sweep_orphans(self._api, settings.namespace, str(settings.instance),
                                      min_age_seconds=settings.sweep_min_age_seconds)
                if swept:
                    logger.info("swept %d leftover Kubernetes objects", len(swept))
            except ExecutorError as exc:  # the API may be down for a while: try again later
                logger.warning("sweeping leftover Kubernetes objects failed: %s", exc)
            self.rounds += 1
            self._stopped.wait(settings.sweep_interval_seconds)


def sweep_leftovers(
    api: KubeApi,
    namespace: str,
    instance: str,
    active_run_ids: Collection[str],
    *,
    min_age_seconds: float = 300.0,
    now: datetime | None = None,
) -> list[Swept]:
    """Delete runyard's objects of inactive runs; answer what was deleted."""
    moment = now or datetime.now(UTC)
    active = frozenset(active_run_ids)
    swept: list[Swept] = []
    for kind in SWEPT_KINDS:
        for item in api.list(kind, namespace, managed_selector(instance=instance)):
            if _is_leftover(item, active, moment, min_age_seconds):
                done = _delete(api, namespace, kind, item)
                if done is not None:
                    swept.append(done)
    return swept
