"""Tasks the tracking tests run in real workers (a plugin made by tracking_support)."""

from __future__ import annotations

import math
import time

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun


class StepsInput(TaskInput):
    steps: int = 1000
    lr: float = 0.1
    model: str = "ridge"
    non_finite: bool = False


class StepsOutput(TaskOutput):
    logged: int


class MetricSteps(Task):
    """Log three metrics over many steps, and params."""

    Input = StepsInput
    Output = StepsOutput
    steps = ("train",)

    def run(self, inputs: StepsInput, run: TaskRun) -> StepsOutput:
        run.log_params({"lr": inputs.lr * 10, "optimizer": "adam", "layers": 3})
        with run.step("train"):
            for step in range(inputs.steps):
                run.log_metric("loss", 1.0 / (step + 1))
                run.log_metrics({"acc": step / inputs.steps, "val/loss": 2.0 - step / 1000})
            if inputs.non_finite:
                run.log_metric("odd", math.nan, step=0)
                run.log_metric("odd", math.inf, step=1)
                run.log_metric("odd", -math.inf, step=2)
                run.log_metric("all_nan", float("nan"))
        return StepsOutput(logged=inputs.steps * 3)


class SlowInput(TaskInput):
    points: int = 30
    every: float = 0.1
    hold: float = 0.0
    fail: bool = False


class SlowMetrics(Task):
    """Log one point every ``every`` seconds, then wait ``hold`` seconds."""

    Input = SlowInput
    Output = StepsOutput

    def run(self, inputs: SlowInput, run: TaskRun) -> StepsOutput:
        for step in range(inputs.points):
            run.log_metric("live", float(step))
            time.sleep(inputs.every)
        time.sleep(inputs.hold)
        if inputs.fail:
            raise RuntimeError("failed after its points")
        return StepsOutput(logged=inputs.points)


class BadInput(TaskInput):
    what: str = "name"


class BadMetric(Task):
    """Log a refused metric; the error reaches the task's code."""

    Input = BadInput
    Output = StepsOutput

    def run(self, inputs: BadInput, run: TaskRun) -> StepsOutput:
        bad = {"name": ("/etc/passwd", 1.0), "value": ("loss", "0.5")}[inputs.what]
        try:
            run.log_metric(*bad)
        except ValueError as exc:
            run.log(f"refused: {exc}")
            run.log_metric("kept", 1.0)
            return StepsOutput(logged=1)
        return StepsOutput(logged=0)


class ManyInput(TaskInput):
    points: int = 100_000


class ManyOutput(TaskOutput):
    seconds: float


class ManyPoints(Task):
    """Log ``points`` points in a tight loop; the seconds it took."""

    Input = ManyInput
    Output = ManyOutput

    def run(self, inputs: ManyInput, run: TaskRun) -> ManyOutput:
        start = time.perf_counter()
        for step in range(inputs.points):
            run.log_metric("x", step * 0.5)
        return ManyOutput(seconds=time.perf_counter() - start)


TASKS = {
    "tracked_steps": "tracking_tasks:MetricSteps",
    "tracked_slow": "tracking_tasks:SlowMetrics",
    "tracked_bad": "tracking_tasks:BadMetric",
    "tracked_many": "tracking_tasks:ManyPoints",
}
