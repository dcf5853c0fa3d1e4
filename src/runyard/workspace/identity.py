"""Task identity: ``task_id = "<task_type>#<task>#<task_name>"`` and its rules.

>>> build_task_id("base", "demo", "api-demo")
'base#demo#api-demo'
>>> parse_task_id("base#demo#api-demo").task_name
'api-demo'
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from typing import NamedTuple

from runyard.errors import InvalidInput, InvalidTaskId
from runyard.wire import RUN_ID_PATTERN
from runyard.workspace.names import readable_name


class TaskType(StrEnum):
    BASE = "base"
    ETL = "etl"
    TRAIN = "train"
    PREDICT = "predict"
    BACKTEST = "backtest"
    ANALYSIS = "analysis"
    INFERENCE = "inference"


TASK_TYPES = frozenset(t.value for t in TaskType)
REG_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TASK_NAME_RE = re.compile(r"^[A-Za-z0-9-]{1,32}$")
RUN_ID_RE = re.compile(RUN_ID_PATTERN)
PARSED_IDS_KEPT = 4096


class TaskId(NamedTuple):
    task_type: str
    task: str
    task_name: str

    def __str__(self) -> str:
        return f"{self.task_type}#{self.task}#{self.task_name}"


def validate_task_name(name: str) -> str:
    if not isinstance(name, str) or not TASK_NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"Invalid task_name {name!r}: use 1-32 English letters, digits or hyphens"
        )
    return name


def validate_reg_name(name: str) -> str:
    if not isinstance(name, str) or not REG_NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"Invalid task registration name {name!r}: use letters, digits, '_' or '-'"
        )
    return name


def is_run_id(run_id: object) -> bool:
    """A run id names one folder or file: never ``..``, ``/``, empty or over 64 chars."""
    return isinstance(run_id, str) and RUN_ID_RE.fullmatch(run_id) is not None


def validate_run_id(run_id: object) -> str:
    if not is_run_id(run_id):
        raise InvalidInput(f"Invalid run_id {run_id!r}: use 1-64 letters, digits, '_' or '-'")
    return run_id  # type: ignore[return-value]


def build_task_id(task_type: str, task: str, task_name: str) -> str:
    return str(_checked(f"{task_type}#{task}#{task_name}", task_type, task, task_name))


def parse_task_id(task_id: object) -> TaskId:
    if not isinstance(task_id, str):
        raise InvalidTaskId(repr(task_id), "a task id is a string")
    return _parsed(task_id)


# A task's id is parsed many times a task (each path to one of its files starts here): the
# ids of the tasks now in use are remembered. An invalid id raises, so it is never kept.
@functools.lru_cache(maxsize=PARSED_IDS_KEPT)
def _parsed(task_id: str) -> TaskId:
    parts = task_id.split("#")
    if len(parts) != 3:
        raise InvalidTaskId(task_id, "expected '<task_type>#<task>#<task_name>'")
    return _checked(task_id, *parts)


def is_task_id(task_id: object) -> bool:
    try:
        parse_task_id(task_id)
    except InvalidInput:
        return False
    return True


def _checked(task_id: str, task_type: str, task: str, task_name: str) -> TaskId:
    if not all(isinstance(part, str) for part in (task_type, task, task_name)):
        raise InvalidTaskId(task_id, "every part of a task id is a string")
    if task_type not in TASK_TYPES:
        raise InvalidTaskId(task_id, f"task type must be one of {', '.join(sorted(TASK_TYPES))}")
    if not REG_NAME_RE.fullmatch(task):
        raise InvalidTaskId(task_id, "task must be letters, digits, '_' or '-'")
    if not TASK_NAME_RE.fullmatch(task_name):
        raise InvalidTaskId(task_id, "task_name must be 1-32 English letters, digits or hyphens")
    return TaskId(task_type, task, task_name)


def generate_task_name(task: str = "", attempt: int = 0) -> str:
    """A candidate name for an unnamed task of ``task``, readable (``demo-brave-otter-7``,
    :mod:`runyard.workspace.names`); the caller takes it only if free, else asks again
    with the next ``attempt``."""
    return readable_name(task, attempt)


def parse_source_tasks(value: object) -> list[str]:
    """Split and validate a comma-separated list of full upstream task ids."""
    if value is None:
        return []
    if not isinstance(value, str):
        raise InvalidInput("source_tasks must be a comma-separated string of full task ids")
    ids = [part.strip() for part in value.split(",") if part.strip()]
    seen: set[str] = set()
    for item in ids:
        if not is_task_id(item):
            raise InvalidInput(
                f"source_tasks entry {item!r} is not a full task id "
                "('<task_type>#<task>#<task_name>')"
            )
        if item in seen:
            raise InvalidInput(f"source_tasks lists {item!r} more than once")
        seen.add(item)
    return ids


def normalise_source_tasks(value: object) -> str:
    return ",".join(parse_source_tasks(value))
