"""The answers of ``machine_status`` and ``list_machines``: AxonX 0.2.2's machine contracts
(``axonx/steps/machine/contracts.py`` and ``utils/build_info.py``), field for field, bounds
and cross-checks included, so an AxonX client validates them with its own models.

The build sits under the key ``axonx`` because that is the name AxonX's model gives it;
what it holds is runyard's version and source revision. There is no disk field: AxonX's
models forbid extra fields (``diagnose`` reports the workspace's free space).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MachineModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BuildInfo(MachineModel):
    """The running runyard: its version, and the git commit and branch of its checkout."""

    version: str = Field(min_length=1)
    git_commit: str | None = None
    git_branch: str | None = None


class CpuInfo(MachineModel):
    total_cores: int | None = Field(default=None, ge=1)
    physical_cores: int | None = Field(default=None, ge=1)
    usage_percent: float = Field(ge=0, le=100)

    @model_validator(mode="after")
    def _cores(self) -> CpuInfo:
        total, physical = self.total_cores, self.physical_cores
        if total is not None and physical is not None and physical > total:
            raise ValueError("physical_cores cannot exceed total_cores")
        return self


class MemoryInfo(MachineModel):
    total_bytes: int = Field(ge=0)
    used_bytes: int = Field(ge=0)
    available_bytes: int = Field(ge=0)
    usage_percent: float = Field(ge=0, le=100)

    @model_validator(mode="after")
    def _capacity(self) -> MemoryInfo:
        if self.used_bytes > self.total_bytes:
            raise ValueError("used_bytes cannot exceed total_bytes")
        if self.available_bytes > self.total_bytes:
            raise ValueError("available_bytes cannot exceed total_bytes")
        return self


class GpuInfo(MachineModel):
    vendor: Literal["nvidia", "amd"]
    index: int = Field(ge=0)
    uuid: str | None = None
    name: str | None = None
    memory_total_bytes: int | None = Field(default=None, ge=0)
    memory_used_bytes: int | None = Field(default=None, ge=0)
    memory_available_bytes: int | None = Field(default=None, ge=0)
    memory_usage_percent: float | None = Field(default=None, ge=0, le=100)
    usage_percent: float | None = Field(default=None, ge=0, le=100)

    @model_validator(mode="after")
    def _memory(self) -> GpuInfo:
        total = self.memory_total_bytes
        if total is None:
            return self
        if self.memory_used_bytes is not None and self.memory_used_bytes > total:
            raise ValueError("memory_used_bytes cannot exceed memory_total_bytes")
        if self.memory_available_bytes is not None and self.memory_available_bytes > total:
            raise ValueError("memory_available_bytes cannot exceed memory_total_bytes")
        return self


class MachineInfo(MachineModel):
    """``machine_status``'s answer."""

    axonx: BuildInfo
    cpu: CpuInfo
    memory: MemoryInfo
    gpus: list[GpuInfo] = Field(default_factory=list)


class MachineHealth(MachineModel):
    """One row of ``list_machines``: a configured target's address and whether it answered
    its ``machine_status``."""

    address: str = Field(min_length=1)
    healthy: bool
