"""Plugins installed while a process runs are found without a restart, but a flood of
unknown names cannot make the registry rescan the entry points on every lookup."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runyard.errors import UnknownTask
from runyard.tasks.registry import RESCAN_INTERVAL, TaskRegistry

PLUGIN = '''
from runyard import Task, TaskOutput, TaskRun


class Late(Task):
    """A task installed after the registry was loaded."""

    def run(self, inputs, run: TaskRun) -> TaskOutput:
        return TaskOutput()
'''


def install_fake_dist(site: Path, module: str, task_name: str) -> None:
    """What an installer leaves behind: the module and a dist-info with the entry point."""
    (site / f"{module}.py").write_text(PLUGIN)
    info = site / f"{module.replace('_', '-')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[runyard.tasks]\n{task_name} = {module}:Late\n")


def wait_rescan_allowed(registry: TaskRegistry) -> None:
    deadline = time.monotonic() + 5 * RESCAN_INTERVAL
    while time.monotonic() - registry.last_scan < RESCAN_INTERVAL:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_unknown_name_rescans_and_finds_a_plugin_installed_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    registry = TaskRegistry.load()
    assert "late_rescan" not in registry.tasks
    install_fake_dist(site, "runyard_late_rescan", "late_rescan")
    wait_rescan_allowed(registry)
    found = registry.get("late_rescan")
    assert found.target == "runyard_late_rescan:Late"
    assert found.definition.source == "plugin"
    assert found.definition.plugin == "runyard_late_rescan"
    assert "late_rescan" in [d.name for d in registry.definitions()]


def test_a_flood_of_unknown_names_rescans_at_most_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    registry = TaskRegistry.load()
    wait_rescan_allowed(registry)
    scans = set()
    started = time.monotonic()
    for index in range(300):
        with pytest.raises(UnknownTask, match=r"^Unknown Task: nope-\d+\. Available: .*demo"):
            registry.get(f"nope-{index}")
        scans.add(registry.last_scan)
    elapsed = time.monotonic() - started
    # one scan per started interval at most (the first lookup of the flood rescans)
    assert 1 <= len(scans) <= int(elapsed / RESCAN_INTERVAL) + 1
    # a plugin installed right after a rescan waits for the next interval: the lookup
    # that follows at once does not rescan again; the next allowed lookup finds it
    wait_rescan_allowed(registry)
    with pytest.raises(UnknownTask):
        registry.get("nope-again")
    install_fake_dist(site, "runyard_late_flood", "late_flood")
    assert time.monotonic() - registry.last_scan < RESCAN_INTERVAL
    with pytest.raises(UnknownTask):
        registry.get("late_flood")
    wait_rescan_allowed(registry)
    assert registry.get("late_flood").target == "runyard_late_flood:Late"


def test_a_registry_without_plugins_never_rescans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    registry = TaskRegistry.load(plugins=False)
    install_fake_dist(site, "runyard_late_off", "late_off")
    wait_rescan_allowed(registry)
    with pytest.raises(UnknownTask, match="^Unknown Task: late_off"):
        registry.get("late_off")
