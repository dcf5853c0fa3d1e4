"""Pipelines in code: steps, their inputs and what they wait for, built in plain Python.

    from runyard import Pipeline

    pipe = Pipeline("research", params={"dataset": "diabetes"})
    etl = pipe.task("research_etl", dataset=pipe.param("dataset"))
    ridge = pipe.task("research_train", model="ridge", depends_on=[etl])
    with Client() as client:
        run = client.run_pipeline(pipe, dataset="wine")

A :class:`Pipeline` only describes; nothing runs until it is sent. A :class:`StepRef`
used as an input value (alone, in a list, or in ``source_tasks``) becomes that step's
task id when the server makes the steps, and the step waits for it as if it were named
in ``depends_on``. A :class:`ParamRef` becomes the run's value of that parameter.

:meth:`Pipeline.wire` is the JSON the server takes (``POST /api/v1/pipelines/runs``)::

    {"pipeline": "research", "params": {"dataset": "wine"},
     "steps": [{"key": "research-etl", "task": "research_etl",
                "inputs": {"dataset": {"$param": "dataset"}}, "depends_on": []}, ...]}

where ``{"$param": NAME}`` and ``{"$step": KEY}`` stand for the references. This module
imports nothing but the standard library and :mod:`runyard.errors`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from runyard.errors import InvalidInput

PARAM_MARK = "$param"
STEP_MARK = "$step"
STEP_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,23}$")
PARAM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
PIPELINE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
RESERVED_INPUTS = frozenset({"task_name", "depends_on"})


@dataclass(frozen=True)
class ParamRef:
    """The value of the pipeline parameter ``name`` in a run."""

    name: str

    def wire(self) -> dict[str, str]:
        return {PARAM_MARK: self.name}


@dataclass(frozen=True)
class StepRef:
    """One step of a pipeline: its task id once a run made it."""

    pipeline: str
    key: str

    def wire(self) -> dict[str, str]:
        return {STEP_MARK: self.key}


@dataclass
class Step:
    key: str
    task: str
    inputs: dict[str, Any]
    depends_on: list[str] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        inputs = {name: _wire_value(value) for name, value in self.inputs.items()}
        return {"key": self.key, "task": self.task, "inputs": inputs,
                "depends_on": list(self.depends_on)}  # fmt: skip


class Pipeline:
    """A named graph of task steps with parameters (``params``: names and defaults)."""

    def __init__(self, name: str, params: dict[str, Any] | None = None) -> None:
        if not isinstance(name, str) or not PIPELINE_NAME_RE.fullmatch(name):
            raise InvalidInput(
                f"Invalid pipeline name {name!r}: 1-40 letters, digits, '_' or '-', "
                "starting with a letter or digit"
            )
        params = dict(params or {})
        for param in params:
            _check_param_name(param)
        self.name = name
        self.params = params
        self.steps: list[Step] = []

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, steps={[s.key for s in self.steps]})"

    def param(self, name: str) -> ParamRef:
        """A reference to parameter ``name``, declared in ``params``."""
        if name not in self.params:
            known = ", ".join(sorted(self.params)) or "none"
            raise InvalidInput(
                f"Pipeline {self.name} has no parameter {name!r} (declared: {known})"
            )
        return ParamRef(name)

    def task(
        self,
        task: str,
        depends_on: list[StepRef] | tuple[StepRef, ...] = (),
        key: str | None = None,
        **inputs: Any,
    ) -> StepRef:
        """Add a step running the registered task ``task`` with ``inputs``; it waits for
        every step of ``depends_on`` and every step referenced in its inputs. ``key`` names
        it within the pipeline (default: from the task's name, numbered when taken)."""
        if not isinstance(task, str) or not task:
            raise InvalidInput("A pipeline step needs the registered name of its task")
        reserved = sorted(RESERVED_INPUTS.intersection(inputs))
        if reserved:
            raise InvalidInput(
                f"Step inputs may not set {', '.join(reserved)}: the pipeline names its "
                "steps' tasks and orders them (use depends_on=[step])"
            )
        key = self._new_key(task) if key is None else self._checked_key(key)
        upstream = [self._own(ref, key) for ref in depends_on]
        for ref in _refs_in(inputs):
            if isinstance(ref, StepRef):
                upstream.append(self._own(ref, key))
            elif ref.name not in self.params:
                raise InvalidInput(f"Step {key}: parameter {ref.name!r} is not declared")
        self.steps.append(Step(key, task, dict(inputs), list(dict.fromkeys(upstream))))
        return StepRef(self.name, key)

    def wire(self, **params: Any) -> dict[str, Any]:
        """The run request: this pipeline with ``params`` over its defaults."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            known = ", ".join(sorted(self.params)) or "none"
            raise InvalidInput(
                f"Pipeline {self.name} has no parameter {', '.join(unknown)} (declared: {known})"
            )
        if not self.steps:
            raise InvalidInput(f"Pipeline {self.name} has no steps")
        return {
            "pipeline": self.name,
            "params": {**self.params, **params},
            "steps": [step.wire() for step in self.steps],
        }

    def _own(self, ref: object, key: str) -> str:
        if not isinstance(ref, StepRef):
            raise InvalidInput(
                f"Step {key}: depends_on takes steps of this pipeline (what pipe.task "
                f"returned), got {ref!r}"
            )
        if ref.pipeline != self.name or ref.key not in {s.key for s in self.steps}:
            raise InvalidInput(f"Step {key}: {ref.key!r} is not a step of pipeline {self.name}")
        return ref.key

    def _new_key(self, task: str) -> str:
        base = re.sub(r"[^A-Za-z0-9-]+", "-", task).strip("-")[:20] or "step"
        taken = {s.key for s in self.steps}
        key, number = base, 2
        while key in taken:
            key, number = f"{base}-{number}", number + 1
        return key

    def _checked_key(self, key: str) -> str:
        if not isinstance(key, str) or not STEP_KEY_RE.fullmatch(key):
            raise InvalidInput(
                f"Invalid step key {key!r}: 1-24 letters, digits or '-', not starting with '-'"
            )
        if key in {s.key for s in self.steps}:
            raise InvalidInput(f"Pipeline {self.name} has a step {key!r} already")
        return key


def _check_param_name(name: object) -> None:
    if not isinstance(name, str) or not PARAM_NAME_RE.fullmatch(name):
        raise InvalidInput(f"Invalid parameter name {name!r}: a Python identifier, at most 64")


def _refs_in(value: Any) -> list[ParamRef | StepRef]:
    if isinstance(value, ParamRef | StepRef):
        return [value]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in _refs_in(item)]
    if isinstance(value, list | tuple):
        return [ref for item in value for ref in _refs_in(item)]
    return []


def _wire_value(value: Any) -> Any:
    if isinstance(value, ParamRef | StepRef):
        return value.wire()
    if isinstance(value, dict):
        return {name: _wire_value(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_wire_value(item) for item in value]
    return value
