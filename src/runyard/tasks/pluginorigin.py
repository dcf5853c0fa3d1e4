"""Where a plugin task was loaded from, to tell when only a restart can bring a change in.

Python imports a module once per process: when the distribution behind a task the server
already imported is upgraded, removed, or its file edited in place (an editable install),
the server keeps the old code. :meth:`PluginOrigin.change` says so in one sentence, which
``runyard defs``, the Studio and ``POST /api/v1/plugins/rescan`` show.

>>> origin = PluginOrigin("hello", "runyard-hello", "0.1", "runyard_hello.hello:Hello", None, None)
>>> origin.change(None).split(";")[0]
'plugin runyard-hello was uninstalled after the server loaded task hello'
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint

RESTART = "restart the server (runyard serve) to use it"


@dataclass(frozen=True)
class PluginOrigin:
    name: str  # the task name (the entry point's)
    distribution: str
    version: str
    target: str  # "module:Class"
    module_file: str | None  # the imported module's file, None when it never imported
    mtime_ns: int | None

    @classmethod
    def of(cls, ep: EntryPoint) -> PluginOrigin:
        """The origin of ``ep`` as imported now (call it right after the import)."""
        dist = ep.dist
        module_file, mtime = module_stamp(ep.value.partition(":")[0])
        return cls(
            ep.name,
            dist.name if dist is not None else ep.module,
            dist.version if dist is not None else "",
            ep.value,
            module_file,
            mtime,
        )

    def same_distribution(self, ep: EntryPoint) -> bool:
        found = ep.dist.name if ep.dist is not None else ep.module
        return found == self.distribution

    def change(self, ep: EntryPoint | None) -> str | None:
        """Why the server's copy of this task is stale, or None when it is not.

        ``ep`` is the task's entry point as installed now (None: no longer installed).
        """
        if ep is None:
            return (
                f"plugin {self.distribution} was uninstalled after the server loaded task "
                f"{self.name}; restart the server to drop it."
            )
        now = ep.dist.version if ep.dist is not None else ""
        if now != self.version:
            return (
                f"plugin {self.distribution} changed from {self.version} to {now} after the "
                f"server loaded task {self.name}; {RESTART}."
            )
        if ep.value != self.target:
            return f"task {self.name} now points to {ep.value}, not {self.target}; {RESTART}."
        if self.module_file is not None and _mtime(self.module_file) != self.mtime_ns:
            return (
                f"the code of task {self.name} ({self.module_file}) changed after the server "
                f"imported it; {RESTART}."
            )
        return None


def module_stamp(module_name: str) -> tuple[str | None, int | None]:
    """The file of an imported module and its modification time (None, None: not imported)."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return None, None
    return path, _mtime(path)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
