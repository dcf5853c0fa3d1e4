"""What a task run asks for: CPUs, memory, GPUs; one model for every place it is declared.

A task class (``resources = Resources(gpus=1)``), the settings (``task_resources: {name:
{...}}``) and a submit (``resources={"gpus": 2}``) each declare some fields; per field, a
submit's value wins over the task name's setting, which wins over the class::

    merged = merge_resources(Resources(cpus=2), Resources(gpus=1), {"gpus": 2})
    merged  # Resources(cpus=2.0, memory_mb=None, gpus=2, gpu_type=None)

Locally GPUs are granted from the coordinator's list (:mod:`runyard.runtime.gpus`) and
``cpus``/``memory_mb`` become the run's cgroup limits; on Kubernetes they become the run
container's requests and limits (see ``docs/resources.md``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runyard.errors import InvalidInput

MAX_GPUS = 64
GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"  # a label value Kubernetes takes


class Resources(BaseModel):
    """A run's resource ask; ``None`` (and ``gpus: 0``) asks for nothing in particular."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # strict: true or "2" is refused, not read as a number
    cpus: float | None = Field(
        None, gt=0, le=4096, strict=True, description="CPUs (fractions allowed)"
    )
    memory_mb: int | None = Field(None, ge=16, le=1 << 30, strict=True, description="Memory in MiB")
    gpus: int = Field(0, ge=0, le=MAX_GPUS, strict=True, description="Whole GPUs, 0-64")
    gpu_type: str | None = Field(
        None,
        pattern=GPU_TYPE_PATTERN,
        description="A GPU product (a node label value on Kubernetes, e.g. NVIDIA-A100-SXM4-80GB)",
    )

    def record(self) -> dict[str, Any]:
        """The fields set to something, as a status records them."""
        return {k: v for k, v in self.model_dump().items() if v is not None and v != 0}


def parse_resources(value: object, where: str) -> Resources:
    """``value`` (a mapping or a :class:`Resources`) checked; :class:`InvalidInput` naming
    ``where`` and what was wrong otherwise."""
    if isinstance(value, Resources):
        return value
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be an object of cpus, memory_mb, gpus, gpu_type")
    try:
        return Resources.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'resources'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidInput(f"{where}: {problems}") from exc


def merge_resources(*layers: Resources | dict[str, Any] | None) -> Resources:
    """The fields each layer set, later layers winning (class, setting, submit)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        checked = parse_resources(layer, "resources")
        merged.update({name: getattr(checked, name) for name in checked.model_fields_set})
    return Resources.model_validate(merged)
