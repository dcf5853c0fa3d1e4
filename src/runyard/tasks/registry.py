"""The task catalogue: built-ins plus plugins from the entry-point group ``runyard.tasks``.

A plugin that fails to import or is malformed is reported by name in ``errors``; it does
not break the catalogue. A plugin installed while the server runs is found without a
restart: asking for a name the catalogue does not know rescans the entry points first, at
most once per :data:`RESCAN_INTERVAL` seconds (so a flood of unknown names cannot make
every request walk ``sys.path``), and only then answers :class:`UnknownTask`.

>>> registry = TaskRegistry.load()
>>> registry.get("demo").task_type
<TaskType.BASE: 'base'>
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from runyard.errors import InvalidInput, UnknownTask
from runyard.tasks.base import Task, TaskDefinition, TaskInput, describe

ENTRY_POINT_GROUP = "runyard.tasks"
BUILTINS = {
    "demo": "runyard.tasks.builtin.demo:Demo",
    "command": "runyard.tasks.builtin.command:Command",
}
RESCAN_INTERVAL = 1.0  # seconds between two rescans for unknown names


@dataclass
class RegisteredTask:
    name: str
    target: str  # "module:Class", what a worker imports
    task_cls: type[Task]
    definition: TaskDefinition


@dataclass
class TaskRegistry:
    tasks: dict[str, RegisteredTask] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    plugins: bool = True
    last_scan: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def load(cls, *, plugins: bool = True) -> TaskRegistry:
        registry = cls(plugins=plugins)
        for name, target in BUILTINS.items():
            registry.add(name, target, plugin=None)
        if plugins:
            registry._scan_plugins()
        return registry

    def _scan_plugins(self) -> None:
        """Add every entry point not registered yet (a known name is never re-imported)."""
        self.last_scan = time.monotonic()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in self.tasks:
                if self.tasks[ep.name].target != ep.value:
                    self.errors[ep.name] = f"plugin name {ep.name!r} is already registered"
                continue
            dist = ep.dist.name if ep.dist is not None else ep.module
            self.errors.pop(ep.name, None)  # a fixed, reinstalled plugin loads now
            self.add(ep.name, ep.value, plugin=dist)

    def rescan(self) -> bool:
        """Look for newly installed plugins; False when the last scan was too recent.

        Import and metadata caches are dropped first: both remember a folder's listing,
        so a package installed after the first scan would stay invisible.
        """
        if not self.plugins:
            return False
        with self._lock:
            if time.monotonic() - self.last_scan < RESCAN_INTERVAL:
                return False
            importlib.invalidate_caches()
            self._scan_plugins()
            return True

    def add(self, name: str, target: str, plugin: str | None) -> None:
        try:
            task_cls = import_target(target)
            definition = describe(task_cls, name, plugin)
        except Exception as exc:  # a broken plugin must not break the catalogue
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            return
        self.tasks[name] = RegisteredTask(name, target, task_cls, definition)

    def names(self) -> list[str]:
        return sorted(self.tasks)

    def get(self, name: str) -> RegisteredTask:
        """The task ``name``; an unknown name rescans the plugins once before failing."""
        found = self.tasks.get(name)
        if found is None and self.rescan():
            found = self.tasks.get(name)
        if found is None:
            raise UnknownTask(name, self.names())
        return found

    def definitions(self) -> list[TaskDefinition]:
        return [self.tasks[name].definition for name in self.names()]

    def validate_inputs(self, name: str, inputs: dict[str, Any]) -> TaskInput:
        """The typed inputs of task ``name``; :class:`InvalidInput` names each bad field."""
        return validate_inputs(self.get(name).task_cls, name, inputs)


def validate_inputs(task_cls: type[Task], name: str, inputs: dict[str, Any]) -> TaskInput:
    try:
        return task_cls.Input.model_validate(inputs)
    except ValidationError as exc:
        raise InvalidInput(f"Invalid input for task {name}: {format_validation(exc)}") from exc


def format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "input"
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown input field"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def import_target(target: str) -> type[Task]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise TypeError(f"entry point {target!r} must look like 'module:Class'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError:
        # a package installed after this process last listed its folder: drop the
        # cached listings and try once more
        importlib.invalidate_caches()
        obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TypeError(f"{target} is not a runyard Task class")
    return obj
