"""The coordinator's GPUs: which devices are free, which run holds which, who waits.

The device list is the ``gpus`` setting where given, else every GPU NVML reports
(:func:`host_gpus`). A run asking for ``resources.gpus: N`` is granted N free devices as it
launches and keeps them until it ends; it sees only those (``CUDA_VISIBLE_DEVICES``), and
a run asking for none sees none while runyard controls any::

    pool = GpuPool([0, 1])
    pool.grant("run-a", 1)      # [0]
    pool.grant("run-b", 2)      # None: one is free, the run waits (GpuWaits)
    pool.release("run-a")
    pool.restore("run-c", [1])  # after a restart: what a live run's status recorded

A run that cannot have its GPUs yet waits in :class:`GpuWaits`, its status saying so in
``queued_reason``; runs behind it that need fewer (or none) launch meanwhile, and the
waiters get the freed devices first, oldest first among those that fit. The grant is kept
in the run's status (``resources.gpu_devices``), so a restarted supervisor rebuilds the
pool from the statuses of the runs it adopts and never grants a device twice.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from runyard.machine.gpus import collect_gpus
from runyard.runtime.spacewait import write_queued_reason
from runyard.runtime.submitters import launch_scope, slot_owner
from runyard.runtime.workerlock import holding_if_free
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

__all__ = [
    "GpuPool", "GpuWaits", "grant_gpus", "granted_devices", "host_gpus", "wanted_gpus",
]  # fmt: skip

log = logging.getLogger(__name__)


def host_gpus(configured: list[int] | None) -> list[int]:
    """The device indices runyard hands out: ``configured`` (the ``gpus`` setting) when
    set, else the indices NVML reports (none without a driver or the ``gpu`` extra)."""
    if configured is not None:
        return list(configured)
    return [gpu.index for gpu in collect_gpus()]


class GpuPool:
    """Devices and their grants; not thread-safe (the supervisor's lock)."""

    def __init__(self, devices: list[int]) -> None:
        self.devices = tuple(devices)
        self._grants: dict[str, tuple[int, ...]] = {}

    @property
    def controlled(self) -> bool:
        """Whether runyard hands out GPUs here (then a run without any sees none)."""
        return bool(self.devices)

    def free(self) -> list[int]:
        held = {device for devices in self._grants.values() for device in devices}
        return [device for device in self.devices if device not in held]

    def grant(self, run_id: str, count: int) -> list[int] | None:
        """``count`` free devices now held by ``run_id`` (its earlier grant if it has one);
        None when fewer are free."""
        if run_id in self._grants:
            return list(self._grants[run_id])
        free = self.free()
        if len(free) < count:
            return None
        self._grants[run_id] = tuple(free[:count])
        return free[:count]

    def restore(self, run_id: str, devices: list[int]) -> None:
        """Hold ``devices`` for ``run_id`` as its status recorded them (an adopted run)."""
        if devices:
            self._grants[run_id] = tuple(devices)

    def release(self, run_id: str) -> None:
        self._grants.pop(run_id, None)

    def clear(self) -> None:
        self._grants.clear()


@dataclass(frozen=True)
class GpuWait:
    order: int
    run_id: str
    owner: str | None
    count: int


class GpuWaits:
    """Runs popped from the queue that wait for GPUs, by task id, oldest first."""

    def __init__(self) -> None:
        self._entries: dict[str, GpuWait] = {}
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def park(self, task_id: str, run_id: str, owner: str | None, count: int) -> None:
        if task_id not in self._entries:
            self._entries[task_id] = GpuWait(next(self._arrivals), run_id, owner, count)

    def pop_fitting(self, free: int, capped: Collection[str | None]) -> tuple[str, str] | None:
        """The oldest waiter that ``free`` devices satisfy and whose owner is not capped,
        removed; None when none fits."""
        for task_id, wait in sorted(self._entries.items(), key=lambda item: item[1].order):
            if wait.count <= free and wait.owner not in capped:
                del self._entries[task_id]
                return task_id, wait.run_id
        return None

    def take(self, task_id: str) -> GpuWait | None:
        """Remove the waiting run of ``task_id`` (a cancel): its entry, or None."""
        return self._entries.pop(task_id, None)

    def clear(self) -> None:
        self._entries.clear()


def wanted_gpus(status: TaskStatus) -> int:
    """How many GPUs the run of ``status`` asked for (0 when it recorded no ask)."""
    count = (status.resources or {}).get("gpus", 0)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def granted_devices(status: TaskStatus) -> list[int]:
    """The devices the status records as granted to its run (``[]`` for none, or a forged
    value that is not a list of device indices)."""
    devices = (status.resources or {}).get("gpu_devices")
    if not isinstance(devices, list):
        return []
    return [d for d in devices if isinstance(d, int) and not isinstance(d, bool) and d >= 0]


def without_grant(resources: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's ``resources`` record without its grant: what a retry of it asks for."""
    if resources is None:
        return None
    return {name: value for name, value in resources.items() if name != "gpu_devices"}


def visible_devices(devices: list[int]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a run granted ``devices`` (``""``: none visible)."""
    return ",".join(str(device) for device in devices)


def record_grant(workspace: Workspace, status: TaskStatus, devices: list[int]) -> TaskStatus:
    """Keep ``devices`` in the ``queued`` status of the run (``resources.gpu_devices``)
    before its worker starts (the worker carries the record on); the status written."""
    resources: dict[str, Any] = {**(status.resources or {}), "gpu_devices": devices}
    updated = status.model_copy(update={"resources": resources})
    with holding_if_free(workspace.lock_path(status.task_id)) as free:
        current = workspace.read_status(status.task_id)
        if free and current is not None and current.run_id == status.run_id:
            updated = current.model_copy(update={"resources": resources})
            # fsynced: a restart rebuilds the grants from it, and must not grant twice
            write_json_atomic(workspace.status_path(status.task_id), updated.to_json())
    return updated


def grant_gpus(
    workspace: Workspace, pool: GpuPool, waits: GpuWaits, status: TaskStatus
) -> TaskStatus | None:
    """The ``queued`` status to launch, its GPUs granted and recorded (as it is for a run
    that asks for none); None when too few are free: the run then waits in ``waits``, its
    status saying why."""
    count = wanted_gpus(status)
    if count == 0:
        return status
    devices = pool.grant(status.run_id, count)
    if devices is not None:
        return record_grant(workspace, status, devices)
    owner = slot_owner(launch_scope(workspace, status))
    waits.park(status.task_id, status.run_id, owner, count)
    reason = f"waiting for {count} free GPU{'s' if count > 1 else ''} of {len(pool.devices)}"
    write_queued_reason(workspace, status.task_id, status.run_id, reason)
    return None
