"""A plugin distribution for the GPU tests, installed into a folder the server's
``PYTHONPATH`` names: tasks that write the ``CUDA_VISIBLE_DEVICES`` they saw and their
start and end times to their result, and hold on until a gate file appears."""

from __future__ import annotations

from pathlib import Path

PACKAGE = "gpuholddemo"
MODULE = '''
import os
import time

from runyard.resource_settings import Resources
from runyard.tasks.base import Task, TaskInput, TaskOutput


class HoldInput(TaskInput):
    gate: str


class HoldOutput(TaskOutput):
    visible: str | None
    order: str | None
    started: float
    ended: float


class GpuHold(Task):
    """Asks for one GPU; records what it sees and holds on until its gate file exists."""

    resources = Resources(gpus=1)
    Input = HoldInput
    Output = HoldOutput

    def run(self, inputs, run):
        started = time.time()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        while not os.path.exists(inputs.gate):
            time.sleep(0.02)
        order = os.environ.get("CUDA_DEVICE_ORDER")
        return HoldOutput(visible=visible, order=order, started=started, ended=time.time())


class PlainHold(GpuHold):
    """As gpu-hold, asking for no GPU."""

    resources = None


class LayeredHold(GpuHold):
    """As gpu-hold with a CPU ask of its own (the settings and a submit add to it)."""

    resources = {"gpus": 1, "cpus": 1.0}
'''
ENTRY_POINTS = (
    "[runyard.tasks]\n"
    "gpu-hold = gpuholddemo:GpuHold\n"
    "plain-hold = gpuholddemo:PlainHold\n"
    "layered-hold = gpuholddemo:LayeredHold\n"
)


def install(site: Path) -> None:
    """The package and its distribution metadata under ``site``."""
    (site / PACKAGE).mkdir(parents=True, exist_ok=True)
    (site / PACKAGE / "__init__.py").write_text(MODULE)
    info = site / f"{PACKAGE}-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
