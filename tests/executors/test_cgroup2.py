"""cgroup v2 on a real cgroup2 hierarchy, whichever version this host runs its cgroups on.

Each test runs through the host's cgroup2 mount (where it has one) and through a mount the
test makes itself at a temporary folder (``mount -t cgroup2``, as root; skipped, naming
the error, when that fails), so a host without cgroup2 is tested too. Everything is made in
a cgroup of the test's own below ours. The limits need the memory, pids and cpu
controllers in the cgroup2 hierarchy: on a host that binds them to cgroup v1 those tests
skip and say so.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.executors.base import Limits
from runyard.executors.cgroups import CgroupHost, cgroup2_host, cgroup_mounts, own_cgroups
from runyard.executors.containment import TASK_PREFIX, Containment
from runyard.runtime.cgroupsweep import STALE_SECONDS, is_empty, sweep_once

MIB = 1 << 20
RESOURCES = ("memory", "pids", "cpu")


@pytest.fixture(params=["the host's mount", "a mount of the test's own"])
def cgroup2_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Our own cgroup in the cgroup2 hierarchy, through the host's mount (where it has one)
    or through one the test makes at a temporary folder (where the host has none, too)."""
    found = cgroup_mounts(Path("/proc/self/mountinfo")).get("")
    own = own_cgroups(Path("/proc/self/cgroup")).get("", "/")
    if request.param == "the host's mount":
        if found is None:
            pytest.skip("this host mounts no cgroup2 (the test's own mount is tried instead)")
        mount, root = found
        yield mount / own.removeprefix(root.rstrip("/")).lstrip("/")
        return
    mount = tmp_path / "cgroup2"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"mount -t cgroup2 failed here: {made.stderr.strip() or made.returncode}")
    try:
        yield mount / own.lstrip("/")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def parent(cgroup2_root: Path) -> Iterator[Path]:
    """A cgroup of the test's own, empty, in which run cgroups are made."""
    folder = cgroup2_root / f"runyard-test-{uuid.uuid4().hex}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup in the cgroup2 hierarchy at {cgroup2_root}: {exc}")
    yield folder
    for inner in sorted(folder.glob("**/"), key=lambda p: len(p.parts), reverse=True):
        kill_all(inner)
        with contextlib.suppress(OSError):
            inner.rmdir()


def kill_all(folder: Path) -> None:
    with contextlib.suppress(OSError):
        (folder / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (folder / "cgroup.procs").exists():
        if not (folder / "cgroup.procs").read_text().split():
            return
        time.sleep(0.01)


def with_controllers(parent: Path) -> CgroupHost:
    """A host making run cgroups in ``parent``, with memory, pids and cpu delegated to it
    (enabled in the subtree above where they are not yet); skips naming what is missing."""
    above = parent.parent / "cgroup.subtree_control"
    for resource in RESOURCES:
        if resource not in above.read_text().split():
            with contextlib.suppress(OSError):
                above.write_text(f"+{resource}")
    available = (parent / "cgroup.controllers").read_text().split()
    missing = [resource for resource in RESOURCES if resource not in available]
    offered = (parent.parent / "cgroup.controllers").read_text().split()
    if set(missing) - set(offered):
        pytest.skip(
            f"no {', '.join(missing)} controller in this host's cgroup2 hierarchy "
            f"(cgroup.controllers of {parent.parent}: {' '.join(offered) or 'empty'}): the "
            "host binds them to cgroup v1 hierarchies, so cgroup2 only tracks processes here"
        )
    if missing:
        pytest.skip(
            f"{', '.join(missing)} cannot be enabled for cgroups below {parent.parent}: "
            "a cgroup2 cgroup that holds processes cannot delegate controllers"
        )
    host = cgroup2_host(parent)
    assert host is not None
    return host


def stopped_child(code: str) -> subprocess.Popen[bytes]:
    script = f"import sys; sys.stdin.readline()\n{code}"
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)  # fmt: skip


def test_limits_are_written_to_memory_max_pids_max_and_cpu_max(parent: Path) -> None:
    host = with_controllers(parent)
    assert host.version == "cgroup2" and host.limitable == set(RESOURCES)
    name = f"{TASK_PREFIX}{uuid.uuid4().hex}"
    setup = Containment(host).prepare(name, Limits(memory_bytes=64 * MIB, pids=16, cpu=0.5))
    folder = parent / name
    assert setup.cgroup is not None and setup.cgroup.folders == {"": folder}
    assert (folder / "memory.max").read_text().strip() == str(64 * MIB)
    assert (folder / "pids.max").read_text().strip() == "16"
    assert (folder / "cpu.max").read_text().strip() == "50000 100000"
    swap = folder / "memory.swap.max"
    assert not swap.exists() or swap.read_text().strip() == "0"
    assert setup.report["enforced_by"] == "cgroup2" and setup.report["kill"] == "cgroup2"
    assert setup.report["by"] == {"memory_mb": "cgroup2", "pids": "cgroup2", "cpu": "cgroup2"}

    forker = stopped_child(
        "import os, time\nn = 0\nfor _ in range(100):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        os.close(1); time.sleep(30); os._exit(0)\n    n += 1\nprint(n)"
    )
    setup.join(forker.pid)
    out, _ = forker.communicate(b"go\n", timeout=60)
    assert int(out) < 16  # pids.max held the forks
    assert setup.end() and not folder.exists()  # killed through cgroup.kill, removed


def test_unlimited_resources_are_left_at_max(parent: Path) -> None:
    host = with_controllers(parent)
    group = host.create(f"{TASK_PREFIX}{uuid.uuid4().hex}", Limits(pids=8))
    folder = group.folders[""]
    assert (folder / "pids.max").read_text().strip() == "8"
    assert (folder / "memory.max").read_text().strip() == "max"
    assert (folder / "cpu.max").read_text().split()[0] == "max"
    assert group.remove()


def test_the_sweep_keeps_a_cgroup_populated_below_and_takes_it_once_empty(parent: Path) -> None:
    """cgroup v2 counts a process in a cgroup below as the cgroup's own (``populated 1`` in
    ``cgroup.events``), though its own ``cgroup.procs`` is empty: the sweep keeps it."""
    host = cgroup2_host(parent) or CgroupHost("cgroup2", {"": parent}, frozenset())
    name = f"{TASK_PREFIX}{uuid.uuid4().hex}"
    group = host.create(name, Limits())
    inner = group.folders[""] / "inner"
    inner.mkdir()
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (inner / "cgroup.procs").write_text(str(sleeper.pid))
        assert (group.folders[""] / "cgroup.procs").read_text().split() == []
        assert not is_empty(group.folders[""])
        later = time.time() + STALE_SECONDS + 60  # a sweep when it is a leftover's age
        assert name not in sweep_once(host, set(), lambda names: set(names), now=later)
        assert group.exists() and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait(10)
    deadline = time.monotonic() + 10
    while not is_empty(group.folders[""]) and time.monotonic() < deadline:
        time.sleep(0.01)
    inner.rmdir()
    assert name in sweep_once(host, set(), now=later) and not group.exists()
