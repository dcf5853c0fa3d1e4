"""``machine_status``: this machine's CPU, memory and GPUs, with runyard's build.

Blocking (psutil samples the CPU load for ``CPU_SAMPLE_SECONDS``, NVML and git are calls
into the system): call :func:`machine_info` off the event loop.
"""

from __future__ import annotations

import functools
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil

from runyard.machine.gpus import collect_gpus
from runyard.machine.models import BuildInfo, CpuInfo, MachineInfo, MemoryInfo

CPU_SAMPLE_SECONDS = 0.1  # AxonX's default sampling window
GIT_TIMEOUT_SECONDS = 2.0
# the checkout an editable install runs from: <root>/src/runyard/machine/metrics.py
CHECKOUT = Path(__file__).resolve().parents[3]


def machine_info() -> MachineInfo:
    return MachineInfo(
        axonx=build_info(), cpu=cpu_info(), memory=memory_info(), gpus=collect_gpus()
    )


def cpu_info() -> CpuInfo:
    total = psutil.cpu_count(logical=True)
    physical = psutil.cpu_count(logical=False)
    if total is not None and physical is not None and physical > total:
        physical = None  # some containers report more cores than threads: say neither
    usage = psutil.cpu_percent(interval=CPU_SAMPLE_SECONDS)
    return CpuInfo(total_cores=total, physical_cores=physical, usage_percent=_percent(usage))


def memory_info() -> MemoryInfo:
    memory = psutil.virtual_memory()
    return MemoryInfo(
        total_bytes=memory.total,
        used_bytes=min(memory.used, memory.total),
        available_bytes=min(memory.available, memory.total),
        usage_percent=_percent(memory.percent),
    )


@functools.cache
def build_info() -> BuildInfo:
    """runyard's version and, when it runs from a git checkout of its own, that checkout's
    commit and branch (read once: the build does not change under a running server)."""
    return build_of(CHECKOUT)


def build_of(root: Path) -> BuildInfo:
    try:
        current = version("runyard")
    except PackageNotFoundError:
        current = "0+unknown"
    if not _is_checkout(root):
        return BuildInfo(version=current)
    commit, branch = _git(root, "rev-parse", "HEAD"), _git(root, "branch", "--show-current")
    return BuildInfo(version=current, git_commit=commit, git_branch=branch)


def _is_checkout(root: Path) -> bool:
    # only runyard's own tree: git run from an installed package would find whatever
    # repository happens to hold the virtual environment, and report its commit
    return (root / ".git").exists() and (root / "src" / "runyard").is_dir()


def _git(root: Path, *arguments: str) -> str | None:
    try:
        reply = subprocess.run(
            ["git", "-C", str(root), *arguments],
            capture_output=True, check=True, text=True, timeout=GIT_TIMEOUT_SECONDS,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return reply.stdout.strip() or None


def _percent(value: float) -> float:
    return min(max(float(value), 0.0), 100.0)
