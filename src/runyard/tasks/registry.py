"""The task catalogue: built-ins plus plugins from the entry-point group ``runyard.tasks``.

A plugin that fails to import or is malformed is reported by name in ``errors``; it does
not break the catalogue. A plugin installed while the server runs is found without a
restart: :meth:`TaskRegistry.rescan` first reads the ``.pth`` files installed since the
start (an editable install's path, see :mod:`runyard.tasks.sitepath`), drops the import and
metadata caches, then reads the entry points again. Asking for a name the catalogue does
not know and listing the definitions rescan at most once per :data:`RESCAN_INTERVAL`
seconds (so a flood of unknown names cannot make every request walk ``sys.path``); the
admin's ``POST /api/v1/plugins/rescan`` rescans at once. A plugin whose code changed after
it was imported (upgraded, removed, edited) is named in ``restart_required`` with the one
sentence that says a restart is needed (:mod:`runyard.tasks.pluginorigin`).

>>> registry = TaskRegistry.load()
>>> registry.get("demo").task_type
<TaskType.BASE: 'base'>
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import ValidationError

from runyard.errors import InvalidInput, UnknownTask
from runyard.suggest import closest
from runyard.tasks.base import Task, TaskDefinition, TaskInput, describe
from runyard.tasks.pluginorigin import PluginOrigin
from runyard.tasks.sitepath import PROCESS_START, SitePath
from runyard.wire import PluginReport
from runyard.workspace.identity import validate_reg_name

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
    restart_required: dict[str, str] = field(default_factory=dict)
    plugins: bool = True
    last_scan: float = field(default=0.0, repr=False)
    _origins: dict[str, PluginOrigin] = field(default_factory=dict, repr=False)
    _site: SitePath | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def load(cls, *, plugins: bool = True) -> TaskRegistry:
        registry = cls(plugins=plugins)
        for name, target in BUILTINS.items():
            registry.add(name, target, plugin=None)
        if plugins:
            registry._site = PROCESS_START
            registry._scan_plugins()
        return registry

    def _scan_plugins(self) -> list[str]:
        """Add every entry point not registered yet; the names added.

        A known name is never imported again: when its code changed since, the task is
        named in ``restart_required`` instead.
        """
        self.last_scan = time.monotonic()
        added, seen = [], set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            seen.add(ep.name)
            if self._is_known(ep):
                continue
            dist = ep.dist.name if ep.dist is not None else ep.module
            self.errors.pop(ep.name, None)  # a fixed, reinstalled plugin loads now
            if self.add(ep.name, ep.value, plugin=dist):
                added.append(ep.name)
            self._origins[ep.name] = PluginOrigin.of(ep)
        self._forget_uninstalled(seen)
        return added

    def _is_known(self, ep: EntryPoint) -> bool:
        """Whether ``ep`` was dealt with before (then its restart note is brought up to date)."""
        origin = self._origins.get(ep.name)
        if origin is not None and origin.same_distribution(ep):
            self._note(ep.name, origin.change(ep))
            # a plugin that failed before it was imported is tried again; one imported
            # (and failed later) would answer from the module Python keeps
            return ep.name in self.tasks or origin.module_file is not None
        if ep.name in self.tasks:
            if self.tasks[ep.name].target != ep.value:
                self.errors[ep.name] = f"plugin name {ep.name!r} is already registered"
            return True
        return False

    def _forget_uninstalled(self, seen: set[str]) -> None:
        for name in set(self._origins) - seen:
            if name in self.tasks:
                self._note(name, self._origins[name].change(None))
            else:  # it never loaded: nothing of it stays
                self.errors.pop(name, None)
                self.restart_required.pop(name, None)
                del self._origins[name]

    def _note(self, name: str, sentence: str | None) -> None:
        if sentence is None:
            self.restart_required.pop(name, None)
        else:
            self.restart_required[name] = sentence

    def rescan(self, *, force: bool = False) -> list[str] | None:
        """Look for newly installed plugins: the names added, None when the last scan was
        too recent (``force`` rescans anyway).

        New ``.pth`` files are read first (an editable install's folder joins ``sys.path``);
        import and metadata caches are dropped, as both remember a folder's listing, so a
        package installed after the first scan would stay invisible.
        """
        if not self.plugins:
            return None
        with self._lock:
            if not force and time.monotonic() - self.last_scan < RESCAN_INTERVAL:
                return None
            if self._site is not None:
                self._site.refresh()
            importlib.invalidate_caches()
            return self._scan_plugins()

    def report(self, added: list[str] | None = None) -> PluginReport:
        """What the catalogue holds now, for the API and the CLI."""
        return PluginReport(
            tasks=self.names(),
            added=sorted(added or []),
            plugin_errors=dict(self.errors),
            restart_required=dict(self.restart_required),
        )

    def add(self, name: str, target: str, plugin: str | None) -> bool:
        """Import and describe ``target`` as task ``name``; False (and ``errors`` says
        why) when it cannot be."""
        try:
            validate_reg_name(name)  # it is a part of every id: no ':', '#' or '/'
            task_cls = import_target(target)
            definition = describe(task_cls, name, plugin)
        except Exception as exc:  # a broken plugin must not break the catalogue
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            return False
        self.tasks[name] = RegisteredTask(name, target, task_cls, definition)
        return True

    def names(self) -> list[str]:
        return sorted(self.tasks)

    def get(self, name: str) -> RegisteredTask:
        """The task ``name``; an unknown name rescans the plugins once before failing."""
        found = self.tasks.get(name)
        if found is None and self.rescan() is not None:
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
        fields = list(task_cls.Input.model_fields)
        raise InvalidInput(
            f"Invalid input for task {name}: {format_validation(exc, fields)}"
        ) from exc


def format_validation(exc: ValidationError, fields: list[str] | None = None) -> str:
    """Each error as ``where: what``; an unknown top-level field names the closest of
    ``fields`` (``yy: unknown input field; did you mean 'y'?``)."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "input"
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown input field" + _field_hint(err["loc"], fields or [])
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _field_hint(where: tuple[int | str, ...], fields: list[str]) -> str:
    close = closest(str(where[0]), fields) if len(where) == 1 else None
    return f"; did you mean '{close}'?" if close else ""


def import_target(target: str) -> type[Task]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise TypeError(f"entry point {target!r} must look like 'module:Class'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError:
        # a package installed after this process last listed its folder, or whose .pth
        # file (an editable install) appeared since it started (a worker forked from a
        # launcher that started before the install): read the new path, drop the cached
        # listings and try once more
        PROCESS_START.refresh()
        importlib.invalidate_caches()
        obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TypeError(f"{target} is not a runyard Task class")
    return obj
