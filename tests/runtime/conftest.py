from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime_helpers import kill_workers, make_settings
from worker_test_tasks import SAMPLE_TASKS

from runyard.config import Settings
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def workspace(settings: Settings) -> Iterator[Workspace]:
    ws = Workspace.open(settings.workspace_dir, settings.log_dir)
    ws.ensure()
    yield ws
    kill_workers(ws)


@pytest.fixture
def registry() -> TaskRegistry:
    reg = TaskRegistry.load(plugins=False)
    for name, target in SAMPLE_TASKS.items():
        reg.add(name, target, plugin="tests")
    assert not reg.errors, reg.errors
    return reg


@pytest.fixture
def make_supervisor(
    settings: Settings, workspace: Workspace, registry: TaskRegistry
) -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def make(start: bool = True, **overrides: object) -> Supervisor:
        custom = settings.model_copy(update=overrides) if overrides else settings
        sup = Supervisor(custom, workspace, registry)
        if start:
            sup.start()
        made.append(sup)
        return sup

    yield make
    for sup in made:
        sup.stop()


@pytest.fixture
def supervisor(make_supervisor: Callable[..., Supervisor]) -> Supervisor:
    return make_supervisor()
