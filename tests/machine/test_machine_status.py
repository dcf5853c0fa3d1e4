"""``runyard.machine``: this machine's status in AxonX's shape, its GPUs through NVML (none
here: no binding, or a binding without a driver, is an empty list, never an error), and
GPU readings that contradict each other dropped rather than failing the whole answer."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from runyard.machine import gpus, metrics
from runyard.machine.gpus import collect_gpus, gpu_info
from runyard.machine.models import CpuInfo, GpuInfo, MachineInfo, MemoryInfo

GIB = 1 << 30


def test_machine_info_reads_this_machine() -> None:
    info = metrics.machine_info()
    assert info.cpu.total_cores == psutil.cpu_count(logical=True)
    assert 0 <= info.cpu.usage_percent <= 100
    assert info.memory.total_bytes == psutil.virtual_memory().total
    assert 0 < info.memory.available_bytes <= info.memory.total_bytes
    MachineInfo.model_validate(info.model_dump(mode="json"))  # round-trips, extra forbidden


def test_build_is_runyards_version_and_this_checkouts_commit() -> None:
    build = metrics.build_info()
    root = Path(metrics.__file__).resolve().parents[3]
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert build.version and build.git_commit == head


def test_an_installed_copy_reports_no_commit_of_the_repository_around_it(tmp_path: Path) -> None:
    """A venv kept inside some other git repository: its site-packages is no runyard
    checkout, so no commit is reported (git run there names the outer repository's)."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "outer"], check=True)
    installed = tmp_path / "venv" / "lib" / "python3.12"  # <this>/site-packages/runyard/...
    (installed / "site-packages" / "runyard" / "machine").mkdir(parents=True)
    assert metrics._git(installed, "rev-parse", "HEAD") is not None  # what git would say
    build = metrics.build_of(installed)
    assert (build.git_commit, build.git_branch) == (None, None)


def test_no_nvml_binding_is_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises
    assert gpus._binding() is None
    assert collect_gpus() == []


def test_a_binding_without_a_driver_is_no_gpus() -> None:
    """The real nvidia-ml-py on a machine without libnvidia-ml: nvmlInit fails, no GPUs."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # a machine with a driver: the list is NVML's own count
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        assert [g.index for g in collect_gpus()] == list(range(count))
        return
    assert collect_gpus() == []


def test_gpu_readings_in_axonx_shape() -> None:
    gpu = gpu_info(0, "GPU-1", "NVIDIA H100", 80 * GIB, 20 * GIB, 60 * GIB, 37.0)
    assert gpu == GpuInfo(
        vendor="nvidia", index=0, uuid="GPU-1", name="NVIDIA H100",
        memory_total_bytes=80 * GIB, memory_used_bytes=20 * GIB,
        memory_available_bytes=60 * GIB, memory_usage_percent=25.0, usage_percent=37.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("used", "free", "usage", "expected"),
    [
        (90 * GIB, 10 * GIB, 50.0, {"memory_used_bytes": None, "memory_usage_percent": None}),
        (10 * GIB, 90 * GIB, 50.0, {"memory_available_bytes": None}),
        (10 * GIB, 70 * GIB, 101.0, {"usage_percent": None}),
        (10 * GIB, 70 * GIB, -1.0, {"usage_percent": None}),
    ],
)
def test_contradicting_gpu_readings_are_dropped_not_fatal(
    used: int, free: int, usage: float, expected: dict[str, object]
) -> None:
    """A driver that reports more used (or free) memory than there is, or a load outside
    0-100, loses that one reading; the answer still validates."""
    gpu = gpu_info(3, None, "", 80 * GIB, used, free, usage)
    for field, value in expected.items():
        assert getattr(gpu, field) == value, field
    assert gpu.name is None and gpu.index == 3
    GpuInfo.model_validate(gpu.model_dump())


def test_unknown_total_keeps_the_other_readings() -> None:
    gpu = gpu_info(1, "GPU-2", "x", None, 5, 7, None)
    assert (gpu.memory_used_bytes, gpu.memory_available_bytes) == (5, 7)
    assert gpu.memory_usage_percent is None


@pytest.mark.parametrize(
    "bad",
    [
        lambda: CpuInfo(total_cores=2, physical_cores=4, usage_percent=1),
        lambda: CpuInfo(total_cores=2, usage_percent=100.5),
        lambda: MemoryInfo(total_bytes=1, used_bytes=2, available_bytes=0, usage_percent=1),
        lambda: MemoryInfo(total_bytes=2, used_bytes=1, available_bytes=3, usage_percent=1),
        lambda: GpuInfo(vendor="intel", index=0),  # type: ignore[arg-type]
        lambda: GpuInfo(vendor="nvidia", index=0, memory_total_bytes=1, memory_used_bytes=2),
        lambda: MachineInfo.model_validate({"axonx": {"version": "1"}, "disk": {}}),
    ],
)
def test_the_models_refuse_what_axonx_refuses(bad: object) -> None:
    with pytest.raises(ValidationError):
        bad()  # type: ignore[operator]


class FakeNvml(types.ModuleType):
    """NVML's binding as a driver with three GPUs answers it: GPU 1 cannot be opened, GPU 2
    (a MIG slice) reports no utilisation and an old binding's bytes name. What no machine
    here has, so the reading code is run against the binding's documented calls."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.shut = 0

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 3

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        if index == 1:
            raise self.NVMLError("GPU is lost")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:  # noqa: N802
        return b"NVIDIA A100 MIG 1g.10gb" if handle == 2 else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: int) -> str:  # noqa: N802
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> types.SimpleNamespace:  # noqa: N802
        return types.SimpleNamespace(total=80 * GIB, used=8 * GIB, free=72 * GIB)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> types.SimpleNamespace:  # noqa: N802
        if handle == 2:
            raise self.NVMLError("Not Supported")
        return types.SimpleNamespace(gpu=42, memory=10)


def test_gpus_read_through_the_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = collect_gpus()
    assert [g.index for g in found] == [0, 2]  # the lost one left out, not the answer
    first, mig = found
    assert (first.name, first.uuid, first.usage_percent) == ("NVIDIA H100 80GB HBM3", "GPU-0", 42)
    assert (first.memory_total_bytes, first.memory_used_bytes) == (80 * GIB, 8 * GIB)
    assert first.memory_available_bytes == 72 * GIB and first.memory_usage_percent == 10.0
    assert mig.name == "NVIDIA A100 MIG 1g.10gb" and mig.usage_percent is None
    assert nvml.shut == 1  # NVML is shut down again after every reading
