"""Cgroups of runs and tasks: create one, limit it, put processes in it, kill all of it.

    host = detect_host()                 # None: no cgroup this process may write here
    group = host.create("runyard-task-ab12", Limits(memory_bytes=512 << 20, pids=64))
    group.add(pid)                       # before that process runs anything of its own
    group.kill()                         # every process in it, setsid'd or double-forked too
    group.remove()

cgroup v2 (where the controllers live on a cgroup2 file system): one folder per run beside
our own cgroup, with ``memory.max`` (and ``memory.swap.max`` 0), ``pids.max``, ``cpu.max``,
killed through ``cgroup.kill`` (or freeze and SIGKILL where the kernel predates it). A
controller our own cgroup does not delegate cannot be limited there; ``host.limitable``
says which can. cgroup v1: one folder per run in each hierarchy it needs, under our own
path in it — ``freezer`` always (it tracks and stops every process of the run; ``pids``
where there is no freezer), ``pids``, ``memory`` (``memory.limit_in_bytes`` and
``memory.memsw.limit_in_bytes``, so swap is no way out) and ``cpu`` (CFS quota) only when
limited. v1 is killed by freezing, SIGKILLing every pid and thawing, until it is empty.

Folders are named from the run or task id, so a server started later finds the cgroup of a
run it adopts (:meth:`CgroupHost.find`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runyard.errors import ExecutorError
from runyard.executors.base import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
RESOURCES = ("memory", "pids", "cpu")
V1_TRACKING = ("pids", "freezer")
CPU_PERIOD_US = 100_000
KILL_TIMEOUT = 10.0
REMOVE_TIMEOUT = 2.0


@dataclass
class Cgroup:
    """One run's cgroup: a folder per hierarchy (v2: exactly one)."""

    name: str
    version: str  # "cgroup2" | "cgroup1"
    folders: dict[str, Path] = field(default_factory=dict)

    @property
    def procs_files(self) -> list[Path]:
        return [folder / "cgroup.procs" for folder in self.folders.values()]

    def add(self, pid: int) -> None:
        """Move ``pid`` into every folder of this cgroup (``0``: the calling process)."""
        for path in self.procs_files:
            _write(path, str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(line) for line in path.read_text().split())
        return found

    def rename(self, name: str) -> bool:
        """Rename the cgroup (its processes stay in it); False where that is not possible
        (cgroup2 has no rename, or ``name`` exists)."""
        if self.version != "cgroup1":
            return False
        renamed: dict[str, Path] = {}
        try:
            for controller, folder in self.folders.items():
                target = folder.with_name(name)
                try:  # no look first: a launch renames a spare to a name no one has
                    folder.rename(target)
                except FileExistsError:
                    target.rmdir()  # a leftover of the same name goes only if it is empty
                    folder.rename(target)
                renamed[controller] = target
        except OSError:
            for controller, target in renamed.items():  # put back what was renamed
                with contextlib.suppress(OSError):
                    target.rename(self.folders[controller])
            return False
        self.name, self.folders = name, renamed
        return True

    def exists(self) -> bool:
        return any(folder.is_dir() for folder in self.folders.values())

    def kill(self, timeout: float = KILL_TIMEOUT) -> bool:
        """SIGKILL every process in the cgroup, until it is empty; False if it is not by
        ``timeout``. Processes forked meanwhile are caught too (frozen first, or killed
        by ``cgroup.kill`` in one go)."""
        deadline = time.monotonic() + timeout
        pause = 0.001
        while self.pids():
            if time.monotonic() > deadline:
                return False
            self._kill_once()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return True

    def _kill_once(self) -> None:
        if self.version == "cgroup2" and (self.folders[""] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.folders[""] / "cgroup.kill", "1")
            return
        with self._frozen():
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    @contextlib.contextmanager
    def _frozen(self) -> Iterator[None]:
        """Freeze the cgroup (so nothing in it forks while we read and kill), then thaw:
        killed processes die once thawed."""
        path, frozen, thawed = self._freezer()
        if path is None:
            yield
            return
        try:
            _write(path, frozen)
            _wait_state(path, frozen, 1.0)
        except OSError:
            path = None
        try:
            yield
        finally:
            if path is not None:
                with contextlib.suppress(OSError):
                    _write(path, thawed)

    def _freezer(self) -> tuple[Path | None, str, str]:
        if self.version == "cgroup2":
            path = self.folders[""] / "cgroup.freeze"
            return (path if path.exists() else None), "1", "0"
        folder = self.folders.get("freezer")
        return (None if folder is None else folder / "freezer.state"), "FROZEN", "THAWED"

    def remove(self, timeout: float = REMOVE_TIMEOUT) -> bool:
        """Remove the (empty) cgroup's folders; False if one is still busy after ``timeout``."""
        deadline = time.monotonic() + timeout
        left = list(self.folders.values())  # one missing already counts as removed
        while left:
            left = [folder for folder in left if not _rmdir(folder)]
            if left and time.monotonic() > deadline:
                return False
            if left:
                time.sleep(0.005)
        return True


@dataclass(frozen=True)
class CgroupHost:
    """Where this process may create cgroups: ``bases`` maps a v1 controller (v2: ``""``)
    to the folder run cgroups are created in; ``limitable`` are the resources a cgroup here
    can limit (of memory, pids, cpu)."""

    version: str
    bases: dict[str, Path]
    limitable: frozenset[str]

    def folders(self, name: str, limits: Limits) -> dict[str, Path]:
        if self.version == "cgroup2":
            return {"": self.bases[""] / name}
        # one hierarchy tracks (the freezer: it also stops forks while we kill), more only
        # to limit: every hierarchy joined costs each launch a migration
        tracking = "freezer" if "freezer" in self.bases else "pids"
        wanted = {tracking, *(res for res in RESOURCES if _requested(limits, res))}
        return {c: base / name for c, base in self.bases.items() if c in wanted}

    def create(self, name: str, limits: Limits) -> Cgroup:
        """Create the cgroup ``name`` with ``limits`` (those in ``limitable``); a stale one
        of that name (a crash between create and remove) is emptied and reused."""
        group = Cgroup(name, self.version, self.folders(name, limits))
        try:
            stale = False
            for folder in group.folders.values():
                try:
                    folder.mkdir()
                except FileExistsError:
                    stale = True
            if stale:
                group.kill()
                _made_now(group)
            self._limit(group, limits)
        except OSError as exc:
            group.remove(0.0)
            raise ExecutorError(f"Cannot set up cgroup {name}: {exc}") from exc
        return group

    def find(self, name: str) -> Cgroup | None:
        """The existing cgroup ``name``, or None."""
        every = Limits(memory_bytes=1, pids=1, cpu=1)
        group = Cgroup(name, self.version, self.folders(name, every))
        group.folders = {c: f for c, f in group.folders.items() if f.is_dir()}
        return group if group.folders else None

    def _limit(self, group: Cgroup, limits: Limits) -> None:
        if self.version == "cgroup2":
            _limit_v2(group.folders[""], limits, self.limitable)
        else:
            _limit_v1(group.folders, limits)


def _made_now(group: Cgroup) -> None:
    """Date a reused cgroup's folders now: sweeps take an old, empty one for a leftover."""
    for folder in group.folders.values():
        with contextlib.suppress(OSError):
            os.utime(folder)


def _requested(limits: Limits, resource: str) -> bool:
    value = {"memory": limits.memory_bytes, "pids": limits.pids, "cpu": limits.cpu}[resource]
    return value is not None


def _limit_v2(folder: Path, limits: Limits, limitable: frozenset[str]) -> None:
    if limits.memory_bytes is not None and "memory" in limitable:
        _write(folder / "memory.max", str(limits.memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
    if limits.pids is not None and "pids" in limitable:
        _write(folder / "pids.max", str(limits.pids))
    if limits.cpu is not None and "cpu" in limitable:
        _write(folder / "cpu.max", f"{_quota(limits.cpu)} {CPU_PERIOD_US}")


def _limit_v1(folders: dict[str, Path], limits: Limits) -> None:
    if limits.memory_bytes is not None and "memory" in folders:
        _write(folders["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
        memsw = folders["memory"] / "memory.memsw.limit_in_bytes"  # only with swap accounting
        if memsw.exists():
            _write(memsw, str(limits.memory_bytes))
    if limits.pids is not None and "pids" in folders:
        _write(folders["pids"] / "pids.max", str(limits.pids))
    if limits.cpu is not None and "cpu" in folders:
        _write(folders["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(folders["cpu"] / "cpu.cfs_quota_us", str(_quota(limits.cpu)))


def _quota(cpu: float) -> int:
    return max(1000, int(cpu * CPU_PERIOD_US))


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _wait_state(path: Path, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while path.read_text().strip() != state and time.monotonic() < deadline:
        time.sleep(0.001)


def _rmdir(folder: Path) -> bool:
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise
    return True


# -- finding where we may create cgroups ---------------------------------------------------


@functools.lru_cache(maxsize=1)
def detect_host() -> CgroupHost | None:
    """This machine's cgroup setup as seen by this process (cached); None when no cgroup
    hierarchy we could track runs in is writable here."""
    own = own_cgroups(Path("/proc/self/cgroup"))
    mounts = cgroup_mounts(Path("/proc/self/mountinfo"))
    v2 = _v2_host(own, mounts)
    if v2 is not None and v2.limitable:
        return v2
    return _v1_host(own, mounts) or v2


def own_cgroups(path: Path) -> dict[str, str]:
    """Controller (v2: ``""``) -> our cgroup path in that hierarchy, from /proc/*/cgroup."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            _, controllers, cgroup_path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = cgroup_path
    return found


def cgroup_mounts(path: Path) -> dict[str, tuple[Path, str]]:
    """Controller (v2: ``""``) -> (mount point, root of the mount in its hierarchy)."""
    found: dict[str, tuple[Path, str]] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            mount = (Path(fields[4]), fields[3])
            if tail[0] == "cgroup2":
                found.setdefault("", mount)
            elif tail[0] == "cgroup":
                for option in tail[2].split(","):
                    found.setdefault(option, mount)
    return found


def _base(own: dict[str, str], mounts: dict[str, tuple[Path, str]], key: str) -> Path | None:
    if key not in own or key not in mounts:
        return None
    mount, root = mounts[key]
    relative = own[key]
    if root != "/" and (relative == root or relative.startswith(root + "/")):
        relative = relative[len(root) :]
    base = mount / relative.lstrip("/")
    return base if base.is_dir() and os.access(base, os.W_OK) else None


def _v2_host(own: dict[str, str], mounts: dict[str, tuple[Path, str]]) -> CgroupHost | None:
    base = _base(own, mounts, "")
    return None if base is None else cgroup2_host(base)


def cgroup2_host(base: Path) -> CgroupHost | None:
    """Run cgroups created in the cgroup2 folder ``base``, limiting what it delegates (it
    is enabled for the subtree where allowed); None when ``base`` is no cgroup2 folder.
    :func:`detect_host` takes our own cgroup as ``base``; a test may take another."""
    if not (base / "cgroup.procs").exists():
        return None
    return CgroupHost("cgroup2", {"": base}, _delegated(base))


def _delegated(base: Path) -> frozenset[str]:
    """The resources our children's cgroups can limit: enable them for our subtree where
    allowed (it is not while our own cgroup holds processes, unless it is the root)."""
    try:
        available = set((base / "cgroup.controllers").read_text().split())
        enabled = set((base / "cgroup.subtree_control").read_text().split())
    except OSError:
        return frozenset()
    for resource in RESOURCES:
        if resource in available and resource not in enabled:
            with contextlib.suppress(OSError):
                _write(base / "cgroup.subtree_control", f"+{resource}")
                enabled.add(resource)
    return frozenset(resource for resource in RESOURCES if resource in enabled)


def _v1_host(own: dict[str, str], mounts: dict[str, tuple[Path, str]]) -> CgroupHost | None:
    bases = {}
    for controller in (*V1_TRACKING, "memory", "cpu"):
        base = _base(own, mounts, controller)
        if base is not None:
            bases[controller] = base
    if "pids" not in bases and "freezer" not in bases:
        return None
    limitable = frozenset(resource for resource in RESOURCES if resource in bases)
    return CgroupHost("cgroup1", bases, limitable)
