"""A run's resources: resolved and checked at submit, applied to its worker at launch.

At submit the ask is the task class's ``resources``, overridden field by field by the
settings' ``task_resources`` entry for the task name, overridden by the submit's own
(:func:`runyard.resource_settings.merge_resources`). A local run is refused
(:class:`ResourcesRefused`, nothing made) when it asks for more GPUs than the server
controls, or for more CPUs or memory than ``task_limits`` allow: those stay the ceiling.

At launch ``cpus`` and ``memory_mb`` replace ``task_limits``' CPU and memory limits of the
run's cgroup, and the environment names the GPUs granted (:func:`apply_resources`).
"""

from __future__ import annotations

import dataclasses

from runyard.config import Settings
from runyard.errors import InvalidInput, ResourcesRefused
from runyard.executors.base import LaunchSpec
from runyard.executors.containment import MIB
from runyard.resource_settings import Resources, merge_resources
from runyard.runtime.gpus import granted_devices, visible_devices
from runyard.workspace.records import TaskStatus

__all__ = ["apply_resources", "resolve_resources"]


def resolve_resources(
    settings: Settings,
    task: str,
    declared: Resources | None,
    asked: object,
    gpu_count: int | None,
    sandboxed: bool = False,
) -> Resources:
    """The resources of a new run of ``task`` (class ``declared``, submit ``asked``);
    ``gpu_count`` is how many GPUs this server hands out (None: the run goes elsewhere, to
    Kubernetes, and only its own rules apply). A ``sandboxed`` run (one an agent run
    submits) may ask for no GPU: its sandbox's ``/dev`` holds no GPU device."""
    if asked is not None and not isinstance(asked, dict | Resources):
        raise ResourcesRefused("resources must be an object of cpus, memory_mb, gpus, gpu_type")
    try:
        merged = merge_resources(declared, settings.task_resources.get(task), asked)
    except InvalidInput as exc:
        raise ResourcesRefused(str(exc)) from exc
    if gpu_count is not None:
        _check_local(settings, merged, gpu_count)
    if sandboxed and merged.gpus:
        raise ResourcesRefused(
            f"resources.gpus {merged.gpus}: a task an agent run submits runs in its sandbox, "
            "which has no GPU devices"
        )
    return merged


def _check_local(settings: Settings, asked: Resources, gpu_count: int) -> None:
    if asked.gpus > gpu_count:
        where = "the gpus setting" if settings.gpus is not None else "NVML"
        raise ResourcesRefused(
            f"resources.gpus {asked.gpus} is more than the {gpu_count} GPUs this server "
            f"controls ({where})"
        )
    if asked.gpu_type is not None and asked.gpus == 0:
        raise ResourcesRefused("resources.gpu_type needs resources.gpus of at least 1")
    ceiling = settings.task_limits
    if asked.cpus is not None and ceiling.cpu is not None and asked.cpus > ceiling.cpu:
        raise ResourcesRefused(
            f"resources.cpus {asked.cpus:g} is more than task_limits.cpu {ceiling.cpu:g}"
        )
    memory = ceiling.memory_mb
    if asked.memory_mb is not None and memory is not None and asked.memory_mb > memory:
        raise ResourcesRefused(
            f"resources.memory_mb {asked.memory_mb} is more than task_limits.memory_mb {memory}"
        )


def apply_resources(spec: LaunchSpec, status: TaskStatus, controlled: bool) -> LaunchSpec:
    """``spec`` with the run's CPU and memory asks as its limits and, where runyard
    controls GPUs (``controlled``), ``CUDA_VISIBLE_DEVICES`` naming only the devices its
    status records as granted (``""`` for none), counted in NVML's order."""
    asked = status.resources or {}
    limits = spec.limits
    cpus, memory_mb = asked.get("cpus"), asked.get("memory_mb")
    if isinstance(cpus, int | float) and not isinstance(cpus, bool) and cpus > 0:
        limits = dataclasses.replace(limits, cpu=float(cpus))
    if isinstance(memory_mb, int) and not isinstance(memory_mb, bool) and memory_mb > 0:
        limits = dataclasses.replace(limits, memory_bytes=memory_mb * MIB)
    env = dict(spec.env)
    devices = granted_devices(status)
    if controlled or devices:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices(devices)
        # CUDA numbers devices fastest first unless told otherwise; NVML (and so the
        # device list) by PCI bus: without this, index 0 may be another GPU than granted
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return dataclasses.replace(spec, limits=limits, env=env)
