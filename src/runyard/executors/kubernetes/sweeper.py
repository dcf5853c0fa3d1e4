"""Delete what runyard left in a namespace for runs that are finished or unknown.

Owner references make Kubernetes delete a run's ConfigMap, Secret and NetworkPolicy with
its Job, and ``ttlSecondsAfterFinished`` deletes the Job. The sweeper covers the rest: a
Job left suspended by a launch that died half-way, objects of runs the caller no longer
tracks, clusters without the TTL controller. Everything carrying
``app.kubernetes.io/managed-by=runyard`` whose run id is not active and which is older than
``min_age_seconds`` (so a launch in progress is never touched) is deleted.

    swept = sweep_leftovers(api, "runyard", active_run_ids={"run-0193…"})
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runyard.executors.kubernetes.api import KubeApi
from runyard.executors.kubernetes.names import RUN_ID_LABEL, managed_selector
from runyard.executors.kubernetes.status import parse_time

SWEPT_KINDS = ("Job", "ConfigMap", "Secret", "NetworkPolicy")


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


def sweep_leftovers(
    api: KubeApi,
    namespace: str,
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
        for item in api.list(kind, namespace, managed_selector()):
            if not _is_leftover(item, active, moment, min_age_seconds):
                continue
            metadata = item["metadata"]
            propagation = "Background" if kind == "Job" else None
            if api.delete(kind, namespace, metadata["name"], propagation=propagation):
                run_id = (metadata.get("labels") or {}).get(RUN_ID_LABEL)
                swept.append(Swept(kind, metadata["name"], run_id))
    return swept
