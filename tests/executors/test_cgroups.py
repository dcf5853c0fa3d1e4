"""Cgroups and the rlimit fallback against this machine's real /sys/fs/cgroup."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.executors.base import LaunchSpec, Limits
from runyard.executors.cgroups import Cgroup, CgroupHost, cgroup_mounts, detect_host, own_cgroups
from runyard.executors.containment import NPROC_NOTE, Containment
from runyard.executors.local import LocalExecutor

PY = sys.executable
MIB = 1 << 20
HOST = detect_host()
UNIFIED = Path("/sys/fs/cgroup/unified")
needs_cgroups = pytest.mark.skipif(HOST is None, reason="no writable cgroup here")
needs_v1 = pytest.mark.skipif(
    HOST is None or HOST.version != "cgroup1", reason="renames need cgroup v1 (cgroup2 has none)"
)
needs_unified = pytest.mark.skipif(
    not (UNIFIED / "cgroup.kill").exists() and not os.access(UNIFIED, os.W_OK),
    reason="no writable cgroup2 with cgroup.kill here",
)  # fmt: skip


@pytest.fixture
def name() -> Iterator[str]:
    made = f"runyard-test-{uuid.uuid4().hex}"
    yield made
    for host in (HOST, v2_tracking_host()):
        for left in (made, f"{made}-spare", f"{made}-other"):  # a failed test's too
            group = host.find(left) if host is not None else None
            if group is not None:
                group.kill()
                group.remove()


def v2_tracking_host() -> CgroupHost | None:
    base = UNIFIED / own_cgroups(Path("/proc/self/cgroup")).get("", "/").lstrip("/")
    return CgroupHost("cgroup2", {"": base}, frozenset()) if base.is_dir() else None


def written_limits(group: Cgroup) -> dict[str, str]:
    """The memory, pids and cpu limits as the kernel shows them, in cgroup v2's words."""
    folders = group.folders
    if group.version == "cgroup2":
        files = {"memory": "memory.max", "pids": "pids.max", "cpu": "cpu.max"}
        return {key: (folders[""] / file).read_text().strip() for key, file in files.items()}
    quota = (folders["cpu"] / "cpu.cfs_quota_us").read_text().strip()
    period = (folders["cpu"] / "cpu.cfs_period_us").read_text().strip()
    return {
        "memory": (folders["memory"] / "memory.limit_in_bytes").read_text().strip(),
        "pids": (folders["pids"] / "pids.max").read_text().strip(),
        "cpu": f"{quota} {period}",
    }


def needs_limits() -> None:
    assert HOST is not None
    if HOST.limitable != {"memory", "pids", "cpu"}:
        pytest.skip(f"this machine's {HOST.version} limits only {sorted(HOST.limitable)}")


def stopped_child(code: str) -> subprocess.Popen[bytes]:
    """A python child that waits for a line on stdin before it runs ``code``."""
    script = f"import sys; sys.stdin.readline()\n{code}"
    return subprocess.Popen([PY, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def release(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdin is not None
    out, _ = proc.communicate(b"go\n", timeout=60)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@needs_cgroups
def test_run_cgroups_are_made_under_our_own_cgroup_paths() -> None:
    """Whichever version this machine has: each base is our own cgroup in its hierarchy."""
    assert HOST is not None
    own = own_cgroups(Path("/proc/self/cgroup"))
    mounts = cgroup_mounts(Path("/proc/self/mountinfo"))
    for controller, base in HOST.bases.items():
        mount, root = mounts[controller]
        assert base == mount / own[controller].removeprefix(root).lstrip("/")
    if HOST.version == "cgroup1":
        assert {"pids", "freezer"} & set(HOST.bases)
        assert HOST.limitable == {"memory", "pids", "cpu"} & set(HOST.bases)
    else:
        assert set(HOST.bases) == {""}
        delegated = (HOST.bases[""] / "cgroup.subtree_control").read_text().split()
        assert HOST.limitable == {"memory", "pids", "cpu"} & set(delegated)


@needs_cgroups
def test_limits_are_written_and_hold_for_a_process_added(name: str) -> None:
    assert HOST is not None
    needs_limits()
    group = HOST.create(name, Limits(memory_bytes=64 * MIB, pids=16, cpu=0.5))
    assert written_limits(group) == {"memory": str(64 * MIB), "pids": "16", "cpu": "50000 100000"}
    if group.version == "cgroup1":
        memsw = group.folders["memory"] / "memory.memsw.limit_in_bytes"
        assert not memsw.exists() or int(memsw.read_text()) == 64 * MIB
    else:
        swap = group.folders[""] / "memory.swap.max"
        assert not swap.exists() or swap.read_text().strip() == "0"

    forker = stopped_child(
        "import os, time\nn = 0\nfor _ in range(100):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        os.close(1); time.sleep(30); os._exit(0)\n    n += 1\nprint(n)"
    )
    group.add(forker.pid)
    assert int(release(forker)) < 16
    assert group.kill(10) and group.pids() == set()

    hog = stopped_child("bytearray(256 << 20); print('allocated')")
    group.add(hog.pid)
    assert release(hog) == b"" and hog.returncode == -signal.SIGKILL
    assert group.remove() and not group.exists()


@needs_cgroups
def test_kill_ends_setsid_children_and_a_fork_storm_then_remove(name: str) -> None:
    assert HOST is not None
    group = HOST.create(name, Limits(pids=200))
    storm = stopped_child(
        "import os, subprocess, time\n"
        "print(subprocess.Popen(['sleep', '300'], start_new_session=True).pid, flush=True)\n"
        "while True:\n"
        "    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.001)\n"
    )
    group.add(storm.pid)
    assert storm.stdin is not None and storm.stdout is not None
    storm.stdin.write(b"go\n")
    storm.stdin.flush()
    escaped = int(storm.stdout.readline())
    deadline = time.monotonic() + 10
    while len(group.pids()) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(group.pids()) >= 50 and alive(escaped)
    assert group.kill(20)
    storm.wait(10)
    storm.stdin.close()
    storm.stdout.close()
    assert not alive(escaped) and group.pids() == set()
    assert group.remove() and HOST.find(name) is None


@needs_cgroups
def test_a_stale_cgroup_of_the_same_name_is_emptied_and_reused(name: str) -> None:
    assert HOST is not None
    stale = HOST.create(name, Limits())
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    stale.add(sleeper.pid)
    again = HOST.create(name, Limits(pids=32))
    assert sleeper.wait(10) == -signal.SIGKILL
    if "pids" in HOST.limitable:
        folder = again.folders.get("pids", again.folders.get(""))
        assert folder is not None and (folder / "pids.max").read_text().strip() == "32"


@needs_unified
def test_cgroup2_tracking_kills_through_cgroup_kill(name: str) -> None:
    host = v2_tracking_host()
    assert host is not None
    group = host.create(name, Limits())
    assert set(group.folders) == {""}
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    group.add(sleeper.pid)
    assert group.pids() == {sleeper.pid}
    assert group.kill(10) and sleeper.wait(10) == -signal.SIGKILL
    assert group.remove() and host.find(name) is None


@needs_unified
def test_without_delegated_controllers_cgroup2_tracks_and_rlimits_limit(
    tmp_path: Path, name: str
) -> None:
    host = v2_tracking_host()
    assert host is not None
    containment = Containment(host)
    report = containment.plan(Limits(memory_bytes=256 * MIB, cpu=1.0), name)
    assert report["enforced_by"] == "rlimit" and report["kill"] == "cgroup2"
    assert report["by"] == {"memory_mb": "rlimit", "cpu": "none"}
    executor = LocalExecutor(containment)
    spec = LaunchSpec(argv=[PY, "-c", "bytearray(512 << 20)"], log_path=tmp_path / "x.log",
                      limits=Limits(memory_bytes=256 * MIB))  # fmt: skip
    handle = executor.launch(spec)
    assert isinstance(handle.data["containment"].cgroup, Cgroup)
    assert executor.wait_exit(handle, 20).exit_code == 1
    assert "MemoryError" in (tmp_path / "x.log").read_text()
    assert handle.data["containment"].cgroup is None  # ended and removed


def test_the_rlimit_fallback_applies_and_says_what_it_cannot_do(tmp_path: Path) -> None:
    containment = Containment(None)
    limits = Limits(memory_bytes=256 * MIB, pids=40, cpu=0.5)
    report = containment.plan(limits)
    assert report["enforced_by"] == "rlimit" and report["kill"] == "process group"
    assert report["by"] == {"memory_mb": "rlimit", "pids": "rlimit", "cpu": "none"}
    assert any(note.startswith(NPROC_NOTE) for note in report["notes"])
    assert any("root" in note for note in report["notes"]) == (os.geteuid() == 0)
    executor = LocalExecutor(containment)
    spec = LaunchSpec(argv=["/bin/sh", "-c", "sleep 30"], log_path=tmp_path / "x.log",
                      limits=limits)  # fmt: skip
    handle = executor.launch(spec)
    try:
        assert resource.prlimit(handle.pid, resource.RLIMIT_AS) == (256 * MIB, 256 * MIB)
        assert resource.prlimit(handle.pid, resource.RLIMIT_NPROC) == (40, 40)
        assert handle.data["limits"] == report | {"cgroup": None}
    finally:
        executor.cancel(handle, 1.0)
        executor.wait_exit(handle, 10)


@needs_cgroups
def test_a_launched_program_is_in_its_cgroup_from_its_first_instruction(tmp_path: Path) -> None:
    executor = LocalExecutor()
    spec = LaunchSpec(argv=["cat", "/proc/self/cgroup"], log_path=tmp_path / "x.log",
                      env={"PATH": os.environ["PATH"]},
                      labels={"runyard.run_id": "first-instruction"})  # fmt: skip
    handle = executor.launch(spec)
    assert executor.wait_exit(handle, 10).exit_code == 0
    memberships = (tmp_path / "x.log").read_text()
    assert "/runyard-task-first-instruction\n" in memberships  # in each hierarchy it joined


@needs_v1
def test_a_rename_replaces_an_empty_leftover_and_never_a_busy_one(name: str) -> None:
    assert HOST is not None
    spare = HOST.create(f"{name}-spare", Limits())
    HOST.create(name, Limits())  # an empty leftover of the name
    assert spare.rename(name) and spare.name == name
    assert HOST.find(f"{name}-spare") is None and spare.folders["freezer"].name == name

    other = HOST.create(f"{name}-other", Limits())
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        spare.add(sleeper.pid)  # the name is busy now
        assert not other.rename(name)
        assert other.name == f"{name}-other" and other.exists()
        assert spare.pids() == {sleeper.pid}
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert spare.kill(10) and spare.remove() and not spare.exists()
    assert other.remove() and HOST.find(f"{name}-other") is None
    assert other.remove()  # removing again: already gone
