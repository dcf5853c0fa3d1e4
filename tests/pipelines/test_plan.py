"""The checks a pipeline run request passes before anything is made
(:func:`runyard.runtime.pipelines.plan.make_plan`), on the real task registry."""

from __future__ import annotations

import pytest

from runyard import Pipeline
from runyard.errors import InvalidPipeline
from runyard.runtime.pipelines.plan import make_plan
from runyard.tasks.registry import TaskRegistry


@pytest.fixture(scope="module")
def registry() -> TaskRegistry:
    return TaskRegistry.load()


def test_steps_come_upstreams_first_with_their_references_replaced(registry: TaskRegistry) -> None:
    pipe = Pipeline("order", params={"n": 4})
    late = {"key": "late", "task": "demo", "inputs": {"x": 1, "y": 1}}
    first = pipe.task("demo", key="first", x=pipe.param("n"), y=1)
    second = pipe.task("demo", key="second", x=1, y=1)
    pipe.task("demo", key="both", x=1, y=2, source_tasks=[first, second])
    body = pipe.wire(n=7)
    body["steps"].insert(0, {**late, "depends_on": ["both"]})  # listed first, made last
    plan = make_plan(registry, body, "abc123")
    assert [step.key for step in plan.steps] == ["first", "second", "both", "late"]
    ids = plan.ids()
    assert ids["first"] == "base#demo#abc123-first"
    assert plan.steps[0].inputs == {"x": 7, "y": 1, "task_name": "abc123-first"}
    both = plan.steps[2]
    assert both.inputs["source_tasks"] == f"{ids['first']},{ids['second']}"
    assert both.depends_on == ["first", "second"]  # implied by the references
    assert both.upstream_ids(ids) == [ids["first"], ids["second"]]


def test_a_cycle_is_named_with_its_path(registry: TaskRegistry) -> None:
    steps = [
        {"key": "a", "task": "demo", "inputs": {"x": 1, "y": 1}, "depends_on": ["c"]},
        {"key": "b", "task": "demo", "inputs": {"x": 1, "y": 1}, "depends_on": ["a"]},
        {"key": "c", "task": "demo", "inputs": {"x": 1, "y": 1}, "depends_on": ["b"]},
        {"key": "free", "task": "demo", "inputs": {"x": 1, "y": 1}},
    ]
    with pytest.raises(InvalidPipeline) as refused:
        make_plan(registry, {"pipeline": "loop", "params": {}, "steps": steps}, "abc123")
    assert refused.value.step == "a"
    assert str(refused.value) == "Step a: its depends_on makes a cycle (a -> c -> b -> a)"


def test_a_reference_in_a_list_beside_an_id_is_a_dependency(registry: TaskRegistry) -> None:
    steps = [
        {"key": "up", "task": "demo", "inputs": {"x": 1, "y": 1}},
        {"key": "down", "task": "demo",
         "inputs": {"x": 1, "y": 1, "source_tasks": ["base#demo#earlier", {"$step": "up"}]}},
    ]  # fmt: skip
    plan = make_plan(registry, {"pipeline": "mixed", "params": {}, "steps": steps}, "abc123")
    down = plan.steps[1]
    assert down.depends_on == ["up"]
    assert down.inputs["source_tasks"] == "base#demo#earlier,base#demo#abc123-up"
