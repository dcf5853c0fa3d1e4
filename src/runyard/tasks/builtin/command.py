"""The ``command`` task: run a command line as a tracked task in its task folder."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from pydantic import Field, field_validator

from runyard.errors import UnsafePath
from runyard.tasks.base import Task, TaskExit, TaskInput, TaskOutput, TaskRun
from runyard.tasks.builtin.outputtail import TAIL_BYTES, TAIL_LINES, LogMark
from runyard.tracking.points import METRICS_FILE, PARAMS_FILE
from runyard.workspace.artifacts import check_relative_path
from runyard.workspace.filenames import shown_name
from runyard.workspace.identity import TaskType
from runyard.workspace.layout import RECORD_FILES


class CommandInput(TaskInput):
    command: str = Field(min_length=1, description="Command line, split like a POSIX shell")
    shell: bool = Field(False, description="Run through /bin/sh -c instead of splitting")
    timeout_seconds: float | None = Field(None, gt=0, description="Fail after this many seconds")
    artifacts: str = Field(
        "**/*",
        description="Comma-separated glob patterns (relative to the task folder) of files "
        "to record as artifacts; empty records none",
    )

    @field_validator("command")
    @classmethod
    def _splittable(cls, value: str) -> str:
        try:
            if not shlex.split(value):
                raise ValueError("command is empty")
        except ValueError as exc:
            raise ValueError(f"cannot split command line: {exc}") from exc
        return value


class CommandOutput(TaskOutput):
    exit_code: int = Field(description="The command's exit code")
    output_tail: str = Field(
        "",
        description=f"The last lines the command wrote (at most {TAIL_LINES} lines, "
        f"{TAIL_BYTES} bytes), as the task's log holds them",
    )


class Command(Task):
    """Run a command line as a tracked task: output goes to the task log, its exit code
    becomes the task's, and files it writes in its task folder are recorded as artifacts."""

    name = "command"
    task_type = TaskType.BASE
    Input = CommandInput
    Output = CommandOutput
    steps = ("run", "collect")

    def run(self, inputs: CommandInput, run: TaskRun) -> CommandOutput:
        mark = LogMark.now()
        with run.step("run"):
            code = _run_command(inputs, run.task_dir, mark)
        if code < 0:
            raise TaskExit(128 - code, _with_tail(f"Command killed by signal {-code}", mark))
        if code != 0:
            raise TaskExit(code, _with_tail(f"Command exited with code {code}", mark))
        tail = mark.tail()  # before the collect step logs anything
        with run.step("collect"):
            for rel in _matching_files(run.task_dir, inputs.artifacts):
                try:
                    check_relative_path(rel)
                except UnsafePath as exc:  # a stray name fails nothing: the file stays, listed
                    run.log(f"not recorded as an artifact: {shown_name(rel)} ({exc.reason})")
                    continue
                run.record_artifact(rel, rel)
        return CommandOutput(exit_code=code, output_tail=tail)


def _with_tail(message: str, mark: LogMark) -> str:
    """A failure's message, followed by the last lines the command wrote."""
    tail = mark.tail()
    return f"{message}; its last output:\n{tail}" if tail else message


def _run_command(inputs: CommandInput, cwd: Path, mark: LogMark) -> int:
    argv = ["/bin/sh", "-c", inputs.command] if inputs.shell else shlex.split(inputs.command)
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise TaskExit(127, f"Cannot start command {argv[0]!r}: {exc.strerror}") from exc
    try:
        return proc.wait(timeout=inputs.timeout_seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        message = _with_tail(f"Command timed out after {inputs.timeout_seconds} s", mark)
        raise TaskExit(124, message) from None
    finally:
        if proc.poll() is None:
            proc.terminate()


# the run's own records: what it logged is read through the tracking routes, not an artifact
_RUN_FILES = RECORD_FILES | {METRICS_FILE, PARAMS_FILE}


def _matching_files(task_dir: Path, patterns: str) -> list[str]:
    found: set[str] = set()
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        for path in task_dir.glob(pattern):
            rel = path.relative_to(task_dir)
            if rel.parts[0].startswith(".") or str(rel) in _RUN_FILES:
                continue
            if path.is_file() and not path.is_symlink():
                found.add(rel.as_posix())
    return sorted(found)
