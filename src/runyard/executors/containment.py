"""What a launch's limits become on this machine, and how everything it starts is ended.

    containment = Containment.detect()
    setup = containment.prepare(cgroup_name(spec.labels), spec.limits)
    setup.join(pid)            # from the launcher, while the new process waits at its gate
    ...
    setup.end()                # kill whatever is left in its cgroup, remove the cgroup
    setup.report               # {"memory_mb": 512, "pids": 64, "cpu": None,
                               #  "enforced_by": "cgroup1", "cgroup": "runyard-task-…", …}

Each resource is limited by the cgroup where the machine allows it (see
:mod:`runyard.executors.cgroups`), else by setrlimit: memory becomes ``RLIMIT_AS`` (address
space, not resident memory), pids ``RLIMIT_NPROC`` (it counts every process of the user,
and does not bind root at all: the report says so), cpu cannot be rate-limited that way and
stays unlimited (the report says so). Every launch gets a cgroup where cgroups are usable —
with no limit, only to track its processes — so ending it kills all of them. The report is
what the run's records keep: what was asked, what enforces each part, and what kills it.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runyard.errors import ExecutorError
from runyard.executors.base import LaunchSpec, Limits
from runyard.executors.cgroups import Cgroup, CgroupHost, detect_host

if TYPE_CHECKING:  # the launcher and the zygote import this module: keep settings out
    from runyard.config import ResourceLimits

MIB = 1 << 20
TASK_PREFIX = "runyard-task-"
AGENT_PREFIX = "runyard-agent-"
LAUNCH_PREFIX = "runyard-launch-"  # a launch that names no run (its launcher removes it)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
NPROC_NOTE = "RLIMIT_NPROC counts every process of the user and does not bind root"
CPU_NOTE = "cpu is not enforced: setrlimit cannot limit a CPU rate"


def to_limits(resources: ResourceLimits, timeout_seconds: float | None = None) -> Limits:
    """The executor's :class:`Limits` for configured ``resources`` (memory in MiB)."""
    memory = None if resources.memory_mb is None else resources.memory_mb * MIB
    return Limits(
        cpu=resources.cpu, memory_bytes=memory, pids=resources.pids,
        timeout_seconds=timeout_seconds,
    )  # fmt: skip


def task_cgroup_name(run_id: str) -> str:
    return TASK_PREFIX + _UNSAFE.sub("_", run_id)


def agent_cgroup_name(run_id: str) -> str:
    return AGENT_PREFIX + _UNSAFE.sub("_", run_id)


def cgroup_name(labels: dict[str, str]) -> str:
    """The cgroup of a launch, from its run's id (so it is found again after a restart)."""
    if labels.get("runyard.agent-run"):
        return agent_cgroup_name(labels["runyard.agent-run"])
    if labels.get("runyard.run_id"):
        return task_cgroup_name(labels["runyard.run_id"])
    return LAUNCH_PREFIX + uuid.uuid4().hex


@dataclass
class Setup:
    """The containment of one launch: its cgroup (if any), the rlimits that stand in for
    what the cgroup cannot limit, and the report of both."""

    report: dict[str, Any]
    cgroup: Cgroup | None = None
    rlimits: list[tuple[int, int]] = field(default_factory=list)

    @property
    def procs_files(self) -> list[str]:
        return [] if self.cgroup is None else [str(path) for path in self.cgroup.procs_files]

    @property
    def needed(self) -> bool:
        """Whether the process must be held at a gate until :meth:`join` is done."""
        return self.cgroup is not None or bool(self.rlimits)

    def join(self, pid: int) -> None:
        """Put ``pid`` (not yet running anything of its own) in the cgroup, apply rlimits."""
        try:
            if self.cgroup is not None:
                self.cgroup.add(pid)
            for which, value in self.rlimits:
                resource.prlimit(pid, which, (value, value))
        except OSError as exc:
            raise ExecutorError(f"Cannot contain process {pid}: {exc}") from exc


    def end(self) -> bool:
        """Kill everything left in the cgroup and remove it; False if some is left."""
        cgroup = self.cgroup  # another thread may end it meanwhile: both ends are harmless
        if cgroup is None:
            return True
        # an empty cgroup (the usual end) is removed at once; a busy one is emptied first
        removed = cgroup.remove(0.0) or (cgroup.kill() and cgroup.remove())
        if removed:
            self.cgroup = None
        return removed

def join_self(procs_files: list[str], rlimits: list[tuple[int, int]]) -> None:
    """What :meth:`Setup.join` does, done by the calling process (a freshly forked child)."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    for which, value in rlimits:
        resource.setrlimit(which, (value, value))


@dataclass(frozen=True)
class Containment:
    """How launches are contained here: with cgroups (``host``), else with rlimits only."""

    host: CgroupHost | None

    @classmethod
    def detect(cls) -> Containment:
        return cls(detect_host())

    def plan(self, limits: Limits, name: str | None = None) -> dict[str, Any]:
        """The report :meth:`prepare` gives for ``limits``, without creating anything."""
        by, notes, _ = self._assign(limits)
        return _report(limits, by, notes, self.host, name)

    def prepare(self, name: str, limits: Limits) -> Setup:
        """Create the cgroup ``name`` (where cgroups are usable) with ``limits``."""
        by, notes, rlimits = self._assign(limits)
        cgroup = None if self.host is None else self.host.create(name, limits)
        return Setup(_report(limits, by, notes, self.host, name), cgroup, rlimits)

    def find(self, name: str) -> Cgroup | None:
        return None if self.host is None else self.host.find(name)

    def sweep(self, name: str) -> bool:
        """Kill whatever is left in cgroup ``name`` (an adopted or ended run's) and remove
        it; False when something survived."""
        cgroup = self.find(name)
        if cgroup is None:
            return True
        return Setup({}, cgroup).end()

    def _assign(self, limits: Limits) -> tuple[dict[str, str], list[str], list[tuple[int, int]]]:
        by: dict[str, str] = {}
        notes: list[str] = []
        rlimits: list[tuple[int, int]] = []
        limitable = self.host.limitable if self.host is not None else frozenset()
        version = self.host.version if self.host is not None else ""
        for key, value in _requested(limits).items():
            if key.split("_")[0] in limitable:
                by[key] = version
            elif key == "memory_mb":
                by[key] = "rlimit"
                rlimits.append((resource.RLIMIT_AS, int(value * MIB)))
            elif key == "pids":
                by[key] = "rlimit"
                rlimits.append((resource.RLIMIT_NPROC, int(value)))
                notes.append(NPROC_NOTE + (" (this server runs as root)" if _root() else ""))
            else:
                by[key] = "none"
                notes.append(CPU_NOTE)
        return by, notes, rlimits


def planned_limits(executor: object, spec: LaunchSpec) -> dict[str, Any] | None:
    """The report ``executor`` will give for launching ``spec`` (None: it does not say, or
    ``spec`` asks for no limits — a run then still gets its tracking cgroup)."""
    containment = getattr(executor, "containment", None)
    if not isinstance(containment, Containment) or not _requested(spec.limits):
        return None
    return containment.plan(spec.limits, cgroup_name(spec.labels))


def sweep(name: str) -> bool:
    """Kill what is left in cgroup ``name`` of this machine and remove it."""
    return Containment.detect().sweep(name)


def existing_cgroups() -> frozenset[str]:
    """The names of the cgroups in this machine's run folders, one listing per hierarchy: a
    start sweeps only those of its many ended runs that have one, instead of looking for
    each."""
    host = detect_host()
    found: set[str] = set()
    for base in () if host is None else host.bases.values():
        with contextlib.suppress(OSError):
            found.update(os.listdir(base))
    return frozenset(found)


def _requested(limits: Limits) -> dict[str, float]:
    values = {
        "memory_mb": None if limits.memory_bytes is None else limits.memory_bytes / MIB,
        "pids": limits.pids,
        "cpu": limits.cpu,
    }
    return {key: value for key, value in values.items() if value is not None}


def _report(
    limits: Limits, by: dict[str, str], notes: list[str], host: CgroupHost | None,
    name: str | None,
) -> dict[str, Any]:  # fmt: skip
    mechanisms = sorted({how for how in by.values() if how != "none"})
    memory = None if limits.memory_bytes is None else limits.memory_bytes // MIB
    return {
        "memory_mb": memory,
        "pids": limits.pids,
        "cpu": limits.cpu,
        "enforced_by": "+".join(mechanisms) or "none",
        "by": by,
        "cgroup": name if host is not None else None,
        "kill": host.version if host is not None else "process group",
        "notes": notes,
    }


def _root() -> bool:
    return os.geteuid() == 0
