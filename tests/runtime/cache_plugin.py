"""A plugin distribution for the cache tests, installed into a folder the server's
``PYTHONPATH`` names: tasks that count their runs in a file (the test reads how many times
a body ran) and write their value as an artifact."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = "cachedemo"
MODULE = '''
from runyard.tasks.base import Task, TaskInput, TaskOutput


class CountedInput(TaskInput):
    value: int
    counter: str


class CountedOutput(TaskOutput):
    value: int


class Counted(Task):
    """Counts its runs in a file and writes its value as an artifact (cached)."""

    cache = True
    Input = CountedInput
    Output = CountedOutput

    def run(self, inputs, run):
        with open(inputs.counter, "a") as counter:
            counter.write(run.task_id + "\\n")
        (run.task_dir / "value.txt").write_text(str(inputs.value))
        run.record_artifact("value", "value.txt")
        return CountedOutput(value=inputs.value)


class Fleeting(Counted):
    """As counted, served from the cache for one second only."""

    cache_expiry_seconds = 1.0


class Uncached(Counted):
    """As counted, not cached unless a submit asks."""

    cache = False
'''
ENTRY_POINTS = (
    "[runyard.tasks]\n"
    "counted = cachedemo:Counted\n"
    "fleeting = cachedemo:Fleeting\n"
    "uncached = cachedemo:Uncached\n"
)


def install(site: Path, version: str) -> None:
    """The package and its distribution metadata at ``version`` (an earlier one replaced)."""
    (site / PACKAGE).mkdir(parents=True, exist_ok=True)
    (site / PACKAGE / "__init__.py").write_text(MODULE)
    for old in site.glob(f"{PACKAGE}-*.dist-info"):
        for file in old.iterdir():
            file.unlink()
        old.rmdir()
    info = site / f"{PACKAGE}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)


def runs_counted(counter: Path) -> list[str]:
    """The task ids whose bodies ran, one a run."""
    if not os.path.exists(counter):
        return []
    return counter.read_text().split()
