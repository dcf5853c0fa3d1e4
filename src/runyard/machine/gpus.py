"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` binding, extra ``gpu``).

No binding installed, no driver, no device or an NVML failure is an empty list, never an
error: ``machine_status`` answers on every machine. A device NVML cannot open is left out
(and logged); a value it cannot read (utilisation under MIG, say) is ``None``.

    collect_gpus()  # [GpuInfo(vendor="nvidia", index=0, name="NVIDIA H100 ...", ...)]
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from runyard.machine.models import GpuInfo

log = logging.getLogger(__name__)


def collect_gpus() -> list[GpuInfo]:
    """Every NVIDIA GPU NVML reports, in its index order; ``[]`` when NVML is not usable."""
    nvml = _binding()
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError) as exc:
        log.debug("NVML not usable, no GPUs listed: %s", exc)
        return []
    try:
        count = nvml.nvmlDeviceGetCount()
        return [gpu for index in range(count) if (gpu := _device(nvml, index)) is not None]
    except nvml.NVMLError as exc:
        log.warning("NVML could not count the GPUs: %s", exc)
        return []
    finally:
        _shutdown(nvml)


def gpu_info(
    index: int,
    uuid: str | None,
    name: str | None,
    total: int | None,
    used: int | None,
    free: int | None,
    usage: float | None,
) -> GpuInfo:
    """One GPU in AxonX's shape from raw readings: a reading that contradicts the total
    (used or free above it) or a usage outside 0-100 becomes ``None`` rather than a refusal
    of the whole answer; ``memory_usage_percent`` is derived from used and total."""
    if total is not None and used is not None and used > total:
        used = None
    if total is not None and free is not None and free > total:
        free = None
    if usage is not None and not 0 <= usage <= 100:
        usage = None
    percent = round(used * 100 / total, 2) if total and used is not None else None
    return GpuInfo(
        vendor="nvidia", index=index, uuid=uuid or None, name=name or None,
        memory_total_bytes=total, memory_used_bytes=used, memory_available_bytes=free,
        memory_usage_percent=percent, usage_percent=usage,
    )  # fmt: skip


def _binding() -> ModuleType | None:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def _device(nvml: ModuleType, index: int) -> GpuInfo | None:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        log.warning("NVML could not open GPU %d: %s", index, exc)
        return None
    memory = _read(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    rates = _read(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    return gpu_info(
        index,
        _text(_read(nvml, nvml.nvmlDeviceGetUUID, handle)),
        _text(_read(nvml, nvml.nvmlDeviceGetName, handle)),
        _count(getattr(memory, "total", None)),
        _count(getattr(memory, "used", None)),
        _count(getattr(memory, "free", None)),
        _number(getattr(rates, "gpu", None)),
    )


def _read(nvml: ModuleType, query: Callable[[Any], Any], handle: Any) -> Any:
    try:
        return query(handle)
    except nvml.NVMLError:
        return None


def _shutdown(nvml: ModuleType) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError as exc:
        log.debug("NVML shutdown failed: %s", exc)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):  # bindings before 11.515 answered bytes
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and value else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
