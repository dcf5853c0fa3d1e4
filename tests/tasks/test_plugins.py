"""Task plugins from the entry-point group ``runyard.tasks``: a real distribution on sys.path."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.tasks.registry import TaskRegistry
from serverproc import start_server

PLUGIN = '''
from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType


class ScaleInput(TaskInput):
    value: float = Field(description="Number to scale")
    factor: float = 2.0


class ScaleOutput(TaskOutput):
    scaled: float


class Scale(Task):
    """Multiply a number by a factor (a plugin task)."""

    task_type = TaskType.ANALYSIS
    Input = ScaleInput
    Output = ScaleOutput
    steps = ("scale",)

    def run(self, inputs: ScaleInput, run: TaskRun) -> ScaleOutput:
        with run.step("scale"):
            run.log(f"scaling {inputs.value}")
            return ScaleOutput(scaled=inputs.value * inputs.factor)


class NoDoc(Task):
    Input = ScaleInput
    Output = ScaleOutput

    def run(self, inputs, run):
        return ScaleOutput(scaled=0)
'''

ENTRY_POINTS = """[runyard.tasks]
scale = labplugin:Scale
nodoc = labplugin:NoDoc
ghost = labplugin_missing:Thing
demo = labplugin:Scale
bad:name = labplugin:Scale
"""


@pytest.fixture
def plugin_path(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "site"
    dist = root / "labplugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (root / "labplugin.py").write_text(PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: labplugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("labplugin", None)


def test_plugins_load_and_broken_ones_are_named(plugin_path: Path) -> None:
    registry = TaskRegistry.load()
    scale = registry.get("scale").definition
    assert scale.source == "plugin" and scale.plugin == "labplugin"
    assert scale.task_type == "analysis"
    assert scale.description == "Multiply a number by a factor (a plugin task)."
    assert set(scale.input_schema["required"]) == {"value"}
    assert "nodoc" not in registry.names() and "docstring" in registry.errors["nodoc"]
    assert "ghost" not in registry.names() and "ModuleNotFoundError" in registry.errors["ghost"]
    assert "already registered" in registry.errors["demo"]
    # a name with ':' could not be told from a task reference's ':' form: refused
    assert "bad:name" not in registry.names() and "registration name" in registry.errors["bad:name"]
    assert registry.get("demo").definition.source == "native"
    assert registry.names() == sorted(registry.names())


def test_a_plugin_task_runs_through_the_server(plugin_path: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(plugin_path), os.environ.get("PYTHONPATH", "")])}
    srv = start_server(tmp_path / "srv", env=env)
    try:
        listed = srv.call("list_installed_task_definitions")
        assert "scale" in [d["name"] for d in listed["answer"]]
        assert set(listed["metadata"]["plugin_errors"]) == {"nodoc", "ghost", "demo", "bad:name"}
        handle = srv.call("submit", task="scale", task_name="scaled", value=1.5, factor=4)["answer"]
        assert handle["task_id"] == "analysis#scale#scaled"
        final = srv.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"], poll_interval=0.05)
        assert final["success"] is True, final
        assert final["answer"]["result"]["scaled"] == 6.0
        assert (srv.workspace / "analysis" / "analysis#scale#scaled" / "metadata.json").is_file()
        missing = srv.call("get_task_definition", task="ghost")
        assert missing["success"] is False and "Available:" in missing["answer"]
    finally:
        srv.stop()
