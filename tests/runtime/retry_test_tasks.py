"""A task for the retry tests: it fails until its attempt counter (a file) reaches a count;
workers import it through PYTHONPATH."""

from __future__ import annotations

from pathlib import Path

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun


class FlakyInput(TaskInput):
    counter: str
    succeed_on: int = 3


class FlakyOutput(TaskOutput):
    attempts: int


class Flaky(Task):
    """Count this attempt in a file; fail before attempt ``succeed_on``."""

    retries = 2
    retry_delay_seconds = 0.05
    Input = FlakyInput
    Output = FlakyOutput

    def run(self, inputs: FlakyInput, run: TaskRun) -> FlakyOutput:
        counter = Path(inputs.counter)
        seen = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(seen + 1))
        (run.task_dir / f"attempt-{seen + 1}.txt").write_text("left in the task folder\n")
        if seen + 1 < inputs.succeed_on:
            raise RuntimeError(f"attempt {seen + 1} fails")
        return FlakyOutput(attempts=seen + 1)
