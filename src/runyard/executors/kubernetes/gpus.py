"""A run's resource asks on Kubernetes: GPUs as the device plugin's extended resource, a GPU
type as a node selector, CPUs and memory as the worker container's requests.

    job = with_gpus(job, settings, gpus=2, gpu_type="NVIDIA-A100-SXM4-80GB")
    # worker limits {"nvidia.com/gpu": "2", ...}; nodeSelector {"nvidia.com/gpu.product": ...}
    asked_requests(settings.resources, {"cpus": 4.0, "memory_mb": 8192})
    # ResourceSettings with requests {"cpu": "4000m", "memory": "8192Mi"}

The resource name (``kubernetes.gpu_resource``, ``nvidia.com/gpu`` by default) and the label
key (``kubernetes.gpu_type_label``, ``nvidia.com/gpu.product`` as NVIDIA's GPU feature
discovery sets it) are settings. Tolerations for GPU nodes come from the pod template. The
device plugin, not runyard, sets which devices the container sees.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from runyard.executors.kubernetes.names import CONTAINER_NAME
from runyard.kubernetes_settings import KubernetesSettings, ResourceSettings

__all__ = ["asked_requests", "gpu_options", "with_gpus"]


def with_gpus(
    job: dict[str, Any], settings: KubernetesSettings, gpus: int, gpu_type: str | None
) -> dict[str, Any]:
    """``job`` with ``gpus`` of ``settings.gpu_resource`` as its worker's limit and, for a
    ``gpu_type``, a node selector on ``settings.gpu_type_label``; as it is for no GPU."""
    if gpus <= 0:
        return job
    shaped = copy.deepcopy(job)
    pod = shaped["spec"]["template"]["spec"]
    worker = next(c for c in pod["containers"] if c["name"] == CONTAINER_NAME)
    # an extended resource's request defaults to its limit, and may not differ from it
    worker.setdefault("resources", {}).setdefault("limits", {})[settings.gpu_resource] = str(gpus)
    if gpu_type is not None:
        pod.setdefault("nodeSelector", {})[settings.gpu_type_label] = gpu_type
    return shaped


def asked_requests(configured: ResourceSettings, asked: dict[str, Any] | None) -> ResourceSettings:
    """``configured`` with the run's ``cpus`` and ``memory_mb`` as its requests (its limits
    come from the launch's, which carry the same asks); ``configured`` when it asks neither."""
    asked = asked or {}
    requests: dict[str, str] = {}
    cpus, memory_mb = asked.get("cpus"), asked.get("memory_mb")
    if isinstance(cpus, int | float) and not isinstance(cpus, bool) and cpus > 0:
        requests["cpu"] = f"{max(1, math.ceil(cpus * 1000))}m"
    if isinstance(memory_mb, int) and not isinstance(memory_mb, bool) and memory_mb > 0:
        requests["memory"] = f"{memory_mb}Mi"
    if not requests:
        return configured
    merged = configured.requests.model_copy(update=requests)
    return configured.model_copy(update={"requests": merged})


def gpu_options(asked: dict[str, Any] | None) -> dict[str, Any]:
    """The ``gpus`` and ``gpu_type`` of a run's recorded ``resources``, as ``RunOptions``
    fields (0 and None for a record without them, or with values of another type)."""
    asked = asked or {}
    gpus, gpu_type = asked.get("gpus", 0), asked.get("gpu_type")
    return {
        "gpus": gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else 0,
        "gpu_type": gpu_type if isinstance(gpu_type, str) else None,
    }
