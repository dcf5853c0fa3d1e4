"""The ``demo`` task: adds two integers, logs ``Demo result=<sum>``."""

from __future__ import annotations

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType


class DemoInput(TaskInput):
    x: int = Field(description="First operand")
    y: int = Field(description="Second operand")
    fail: bool = Field(False, description="Fail on purpose, to demonstrate a failed task")


class DemoOutput(TaskOutput):
    result: int = Field(description="x + y")


class Demo(Task):
    """Demonstrate synchronous Task execution with a small arithmetic workflow."""

    name = "demo"
    task_type = TaskType.BASE
    Input = DemoInput
    Output = DemoOutput
    steps = ("prepare", "compute")

    def run(self, inputs: DemoInput, run: TaskRun) -> DemoOutput:
        with run.step("prepare"):
            run.log(f"Demo inputs x={inputs.x} y={inputs.y}")
        with run.step("compute"):
            if inputs.fail:
                raise RuntimeError("Demo failure requested (fail=true)")
            result = inputs.x + inputs.y
            run.log(f"Demo result={result}")
        return DemoOutput(result=result)
