"""A pipeline run request checked whole, before anything is made.

    plan = make_plan(registry, body, run_id)   # InvalidPipeline names the step at fault
    for step in plan.steps:                    # upstreams first
        step.task, step.inputs, step.upstream_ids

The request is the wire form of :meth:`runyard.pipelines.build.Pipeline.wire`. Every step
is checked here: its key, its task (registered), its ``depends_on`` (keys of this request,
no cycle), its references (``{"$param": name}`` to a parameter of the request,
``{"$step": key}`` to another step) and its inputs, once the references are replaced,
against the task's input model. The task ids are chosen here too
(``<task_type>#<task>#<suffix>-<key>``, the suffix that of the run id), so a step's inputs
are validated with the very ids its upstreams will have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runyard.errors import InvalidInput, InvalidPipeline, UnknownTask
from runyard.pipelines.build import (
    PARAM_MARK,
    PARAM_NAME_RE,
    PIPELINE_NAME_RE,
    RESERVED_INPUTS,
    STEP_KEY_RE,
    STEP_MARK,
)
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.identity import build_task_id

MAX_STEPS = 200
REQUEST_FIELDS = frozenset({"pipeline", "params", "steps"})
STEP_FIELDS = frozenset({"key", "task", "inputs", "depends_on"})
LISTED_INPUT = "source_tasks"  # a string of comma-joined ids: a list of steps is joined


@dataclass(frozen=True)
class PlannedStep:
    key: str
    task: str
    task_id: str
    inputs: dict[str, Any]
    depends_on: list[str]  # step keys, given and implied by references

    def upstream_ids(self, ids: dict[str, str]) -> list[str]:
        return [ids[key] for key in self.depends_on]


@dataclass(frozen=True)
class Plan:
    pipeline: str
    params: dict[str, Any]
    steps: list[PlannedStep]  # upstreams before their dependents

    def ids(self) -> dict[str, str]:
        return {step.key: step.task_id for step in self.steps}


def make_plan(registry: TaskRegistry, body: object, suffix: str) -> Plan:
    """The checked plan of ``body``; :class:`InvalidPipeline` for the first fault found."""
    if not isinstance(body, dict):
        raise InvalidPipeline("The body must be a JSON object with pipeline, params and steps")
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        raise InvalidPipeline(f"Unknown field(s) {', '.join(unknown)}; allowed: pipeline, "
                              "params, steps")  # fmt: skip
    name = body.get("pipeline")
    if not isinstance(name, str) or not PIPELINE_NAME_RE.fullmatch(name):
        raise InvalidPipeline(f"Invalid pipeline name {name!r}: 1-40 letters, digits, '_' or '-'")
    params = _params(body.get("params", {}))
    raw = _raw_steps(body.get("steps"))
    ids = {key: _task_id(registry, key, step["task"], suffix) for key, step in raw.items()}
    deps = {key: _depends_on(key, step, raw) for key, step in raw.items()}
    order = _order(deps)
    steps = [_planned(registry, key, raw[key], deps[key], ids, params) for key in order]
    return Plan(name, params, steps)


def _params(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidPipeline("params must be an object of parameter names and values")
    bad = [name for name in value if not PARAM_NAME_RE.fullmatch(name)]
    if bad:
        raise InvalidPipeline(f"Invalid parameter name {bad[0]!r}: a Python identifier")
    return dict(value)


def _raw_steps(value: object) -> dict[str, dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidPipeline("steps must be a non-empty list of steps")
    if len(value) > MAX_STEPS:
        raise InvalidPipeline(f"A pipeline has at most {MAX_STEPS} steps, got {len(value)}")
    steps: dict[str, dict[str, Any]] = {}
    for index, step in enumerate(value):
        key = step.get("key") if isinstance(step, dict) else None
        if not isinstance(key, str) or not STEP_KEY_RE.fullmatch(key):
            raise InvalidPipeline(f"step {index} has no valid key ({key!r}): 1-24 letters, "
                                  "digits or '-'")  # fmt: skip
        assert isinstance(step, dict)
        if key in steps:
            raise InvalidPipeline("a second step has this key", key)
        extra = sorted(set(step) - STEP_FIELDS)
        if extra:
            raise InvalidPipeline(f"unknown field(s) {', '.join(extra)}; allowed: key, task, "
                                  "inputs, depends_on", key)  # fmt: skip
        if not isinstance(step.get("inputs", {}), dict):
            raise InvalidPipeline("inputs must be an object of field values", key)
        steps[key] = step
    return steps


def _task_id(registry: TaskRegistry, key: str, task: object, suffix: str) -> str:
    if not isinstance(task, str):
        raise InvalidPipeline("task must be the registered name of a task", key)
    try:
        task_type = registry.get(task).definition.task_type
    except UnknownTask as exc:
        raise InvalidPipeline(str(exc), key) from exc
    return build_task_id(task_type, task, f"{suffix}-{key}")


def _depends_on(key: str, step: dict[str, Any], steps: dict[str, Any]) -> list[str]:
    given = step.get("depends_on", [])
    if not isinstance(given, list) or not all(isinstance(k, str) for k in given):
        raise InvalidPipeline("depends_on must be a list of step keys", key)
    keys = list(dict.fromkeys([*given, *_step_refs(key, step.get("inputs", {}))]))
    for upstream in keys:
        if upstream == key:
            raise InvalidPipeline("a step cannot depend on itself", key)
        if upstream not in steps:
            raise InvalidPipeline(f"depends on {upstream!r}, which is not a step of this "
                                  "pipeline", key)  # fmt: skip
    return keys


def _order(deps: dict[str, list[str]]) -> list[str]:
    """The keys, each after its upstreams (request order kept where free), or a cycle."""
    placed: list[str] = []
    done: set[str] = set()
    while len(placed) < len(deps):
        ready = [k for k in deps if k not in done and all(u in done for u in deps[k])]
        if not ready:
            stuck = next(k for k in deps if k not in done)
            cycle = _cycle(deps, stuck, done)
            raise InvalidPipeline(f"its depends_on makes a cycle ({cycle})", stuck)
        placed.extend(ready)
        done.update(ready)
    return placed


def _cycle(deps: dict[str, list[str]], start: str, done: set[str]) -> str:
    """A cycle through the unplaced steps: each has an unplaced upstream, so following one
    from ``start`` comes back to a step already seen."""
    path, key = [start], start
    while True:
        key = next(u for u in deps[key] if u not in done)
        if key in path:
            return " -> ".join([*path[path.index(key) :], key])
        path.append(key)


def _planned(
    registry: TaskRegistry,
    key: str,
    step: dict[str, Any],
    deps: list[str],
    ids: dict[str, str],
    params: dict[str, Any],
) -> PlannedStep:
    inputs = step.get("inputs", {})
    reserved = sorted(RESERVED_INPUTS.intersection(inputs))
    if reserved:
        raise InvalidPipeline(f"inputs may not set {', '.join(reserved)} (the pipeline names "
                              "and orders its steps)", key)  # fmt: skip
    resolved = {name: _resolve(key, name, value, ids, params) for name, value in inputs.items()}
    task = step["task"]
    inputs = {**resolved, "task_name": ids[key].rsplit("#", 1)[1]}
    try:
        registry.validate_inputs(task, inputs)
    except InvalidInput as exc:
        raise InvalidPipeline(str(exc), key) from exc
    return PlannedStep(key, task, ids[key], inputs, deps)


def _resolve(key: str, field: str, value: Any, ids: dict[str, str], params: dict[str, Any]) -> Any:
    ref = _reference(value)
    if ref is not None:
        mark, name = ref
        if mark == STEP_MARK:
            return ids[name]  # checked by _depends_on
        if name not in params:
            raise InvalidPipeline(
                f"input {field} names parameter {name!r}, which the run "
                f"does not have (params: {', '.join(params) or 'none'})",
                key,
            )
        return params[name]
    if isinstance(value, list):
        items = [_resolve(key, field, item, ids, params) for item in value]
        if field == LISTED_INPUT and all(isinstance(item, str) for item in items):
            return ",".join(items)
        return items
    if isinstance(value, dict):
        return {name: _resolve(key, field, item, ids, params) for name, item in value.items()}
    return value


def _reference(value: Any) -> tuple[str, str] | None:
    """``(mark, name)`` of a ``{"$param": name}`` or ``{"$step": key}`` value, else None."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((mark, name),) = value.items()
    if mark in (PARAM_MARK, STEP_MARK) and isinstance(name, str):
        return mark, name
    return None


def _step_refs(key: str, value: Any) -> list[str]:
    ref = _reference(value)
    if ref is not None:
        return [ref[1]] if ref[0] == STEP_MARK else []
    if isinstance(value, dict):
        return [k for item in value.values() for k in _step_refs(key, item)]
    if isinstance(value, list):
        return [k for item in value for k in _step_refs(key, item)]
    return []
