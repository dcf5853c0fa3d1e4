"""Tasks used by the runtime tests; workers import them through PYTHONPATH."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from pydantic import Field

from runyard.tasks.base import Task, TaskExit, TaskInput, TaskOutput, TaskRun


class SleepyInput(TaskInput):
    seconds: float = 30.0
    marker: str = ""
    ignore_term: bool = False


class SleepyOutput(TaskOutput):
    slept: float


class Sleepy(Task):
    """Sleep in small slices, reporting progress; optionally ignore SIGTERM."""

    Input = SleepyInput
    Output = SleepyOutput
    steps = ("sleep",)

    def run(self, inputs: SleepyInput, run: TaskRun) -> SleepyOutput:
        if inputs.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with run.step("sleep"):
            run.log(f"sleeping {inputs.seconds}")
            deadline = time.monotonic() + inputs.seconds
            while time.monotonic() < deadline:
                time.sleep(0.01)
        return SleepyOutput(slept=inputs.seconds)


class ProgressOutput(TaskOutput):
    seen: list[float] = Field(default_factory=list)


class Progress(Task):
    """Report progress out of order and out of range."""

    Output = ProgressOutput
    steps = ("work",)

    def run(self, inputs: TaskInput, run: TaskRun) -> ProgressOutput:
        for value in (50, 20, 70, 150, -5):
            run.progress("work", value)
        run.progress("extra", 30)
        return ProgressOutput()


class EnvOutput(TaskOutput):
    env: dict[str, str]
    cwd: str


class EnvDump(Task):
    """Answer the worker's environment and working directory."""

    Output = EnvOutput

    def run(self, inputs: TaskInput, run: TaskRun) -> EnvOutput:
        return EnvOutput(env=dict(os.environ), cwd=os.getcwd())


class ExitInput(TaskInput):
    code: int = 7


class ExitWith(Task):
    """Fail with a chosen exit code."""

    Input = ExitInput

    def run(self, inputs: ExitInput, run: TaskRun) -> TaskOutput:
        raise TaskExit(inputs.code, f"leaving with {inputs.code}")


class FileOutput(TaskOutput):
    written: str


class WriteFile(Task):
    """Write a file in the task folder and record it as an artifact."""

    Output = FileOutput

    def run(self, inputs: TaskInput, run: TaskRun) -> FileOutput:
        Path(run.task_dir, "data").mkdir()
        Path(run.task_dir, "data", "out.bin").write_bytes(b"\x00\x01" * 5000)
        run.record_artifact("blob", "data/out.bin")
        return FileOutput(written="data/out.bin")


class BurstInput(TaskInput):
    reports: int = 200
    hold: str = ""  # after the burst, wait (up to 20 s) until this file exists


class Burst(Task):
    """Report progress many times in a tight loop, then optionally hold."""

    Input = BurstInput
    Output = ProgressOutput
    steps = ("work",)

    def run(self, inputs: BurstInput, run: TaskRun) -> ProgressOutput:
        started = time.monotonic()
        for i in range(inputs.reports):
            run.progress("work", 100 * (i + 1) / inputs.reports)
        took = time.monotonic() - started  # answered: a slow machine may write more often
        deadline = time.monotonic() + 20
        while inputs.hold and not os.path.exists(inputs.hold) and time.monotonic() < deadline:
            time.sleep(0.01)
        return ProgressOutput(seen=[took])


SAMPLE_TASKS = {
    "burst": "worker_test_tasks:Burst",
    "sleepy": "worker_test_tasks:Sleepy",
    "progress": "worker_test_tasks:Progress",
    "envdump": "worker_test_tasks:EnvDump",
    "exitwith": "worker_test_tasks:ExitWith",
    "writefile": "worker_test_tasks:WriteFile",
}
