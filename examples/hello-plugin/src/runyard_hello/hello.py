"""``hello`` (base): greet someone a few times, report progress, write ``greeting.txt``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from runyard import Task, TaskInput, TaskOutput, TaskRun, TaskType


class HelloInput(TaskInput):
    who: str = Field("world", min_length=1, max_length=64, description="Whom to greet")
    times: int = Field(3, ge=1, le=100, description="How many greetings to write")


class HelloOutput(TaskOutput):
    greeting: str = Field(description="The greeting written")
    lines: int = Field(description="Lines in greeting.txt")


class Hello(Task):
    """Greet someone: write the greeting to greeting.txt a number of times."""

    task_type = TaskType.BASE
    Input = HelloInput
    Output = HelloOutput
    steps = ("greet", "write")

    def run(self, inputs: HelloInput, run: TaskRun) -> HelloOutput:
        greeting = f"Hello, {inputs.who}!"
        lines = []
        with run.step("greet"):
            for index in range(inputs.times):
                lines.append(greeting)
                run.progress("greet", 100.0 * (index + 1) / inputs.times)
        with run.step("write"):
            Path(run.task_dir, "greeting.txt").write_text("\n".join(lines) + "\n")
            run.record_artifact("greeting", "greeting.txt")
            run.log(f"wrote {len(lines)} lines")
        return HelloOutput(greeting=greeting, lines=len(lines))
