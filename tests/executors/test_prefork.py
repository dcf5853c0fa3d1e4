"""The pre-forked launcher with a real zygote and real forked children."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.executors.base import LaunchSpec, Limits
from runyard.executors.cgroups import CgroupHost, detect_host
from runyard.executors.containment import Containment
from runyard.executors.pidwatch import process_start_time
from runyard.executors.prefork import SPARE_PREFIX, STANDBYS, PreforkExecutor

HERE = Path(__file__).parent
PY = sys.executable


@pytest.fixture
def executor() -> Iterator[PreforkExecutor]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
    executor = PreforkExecutor(PY, ["json", "prefork_probe"], env)
    executor.start()
    yield executor
    executor.close()


def probe(tmp_path: Path, request: dict, **extra: object) -> LaunchSpec:
    values: dict[str, object] = {
        "argv": [PY, "-m", "prefork_probe"], "log_path": tmp_path / "logs" / "probe.log",
        "stdin": json.dumps(request).encode(), "env": {"ONLY": "this"},
    }
    values.update(extra)
    return LaunchSpec(**values)  # type: ignore[arg-type]


def log_of(tmp_path: Path) -> str:
    """The probe's log so far: empty until the launched child has opened it."""
    log = tmp_path / "logs" / "probe.log"
    return log.read_text() if log.exists() else ""


def wait_for_line(tmp_path: Path, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in log_of(tmp_path):
        assert time.monotonic() < deadline, log_of(tmp_path)
        time.sleep(0.01)


def test_inputs_are_not_on_the_childs_cmdline(executor, tmp_path):
    handle = executor.launch(probe(tmp_path, {"action": "sleep", "marker": "m-9f8e7d"}))
    wait_for_line(tmp_path, "ready")
    cmdline = Path(f"/proc/{handle.pid}/cmdline").read_bytes()
    assert b"runyard.executors.zygote" in cmdline and b"m-9f8e7d" not in cmdline
    executor.cancel(handle, grace_seconds=2)
    assert executor.wait_exit(handle, 10).exit_code == -signal.SIGTERM


def test_specs_it_cannot_fork_fall_back_to_plain_processes(executor, tmp_path):
    plain = LaunchSpec(argv=["/bin/sh", "-c", "echo plain"], log_path=tmp_path / "plain.log")
    handle = executor.launch(plain)
    assert "process" in handle.data
    assert executor.wait_exit(handle, 10).exit_code == 0
    assert (tmp_path / "plain.log").read_text() == "plain\n"


def test_forked_workers_run_inside_their_cgroup_and_limits(executor, tmp_path):
    limits = Limits(memory_bytes=128 << 20, pids=32)
    sleeper = executor.launch(probe(tmp_path, {"action": "sleep"}, limits=limits,
                                    labels={"runyard.run_id": "forked-sleeper"}))
    host = detect_host()
    assert host is not None
    by = {host.version if res in host.limitable else "rlimit" for res in ("memory", "pids")}
    assert "zygote" in sleeper.data
    assert sleeper.data["limits"]["enforced_by"] == "+".join(sorted(by))
    wait_for_line(tmp_path, "ready")
    memberships = Path(f"/proc/{sleeper.pid}/cgroup").read_text()
    name = "runyard-task-forked-sleeper"
    joined = [line for line in memberships.splitlines() if line.endswith(f"/{name}")]
    assert len(joined) == len(host.folders(name, limits))  # every hierarchy of its cgroup
    executor.cancel(sleeper, grace_seconds=2)
    assert executor.wait_exit(sleeper, 10).exit_code == -signal.SIGTERM

    hog = executor.launch(probe(tmp_path, {"action": "alloc", "bytes": 512 << 20}, limits=limits))
    assert executor.wait_exit(hog, 30).exit_code == -signal.SIGKILL  # the cgroup's OOM killer
    assert host.find(name) is None


def test_a_dead_zygote_is_replaced_and_its_children_run_on(executor, tmp_path):
    sleeper = executor.launch(probe(tmp_path, {"action": "sleep"}))
    wait_for_line(tmp_path, "ready")
    zygote = sleeper.data["zygote"]
    os.kill(zygote._proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while zygote.alive:
        assert time.monotonic() < deadline
        time.sleep(0.01)

    assert executor.poll(sleeper) is None
    assert os.getpgid(sleeper.pid) == sleeper.pid  # still running
    handle = executor.launch(probe(tmp_path, {"code": 2}))
    assert handle.data["zygote"] is not zygote
    assert executor.wait_exit(handle, 10).exit_code == 2

    os.killpg(sleeper.pid, signal.SIGKILL)
    assert executor.wait_exit(sleeper, 10) is None  # its exit code died with its zygote
    assert sleeper.data["containment"].cgroup is None  # yet its cgroup was ended


def test_a_child_gets_exactly_its_specs_environment_not_the_zygotes(tmp_path):
    zygote_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE),
                  "KEPT": "same", "CHANGED": "zygote's", "DROPPED": "zygote's only"}
    executor = PreforkExecutor(PY, ["prefork_probe"], zygote_env)
    executor.start()
    try:
        task_env = {"PYTHONPATH": str(HERE), "KEPT": "same", "CHANGED": "the task's",
                    "ADDED": "the task's only"}
        handle = executor.launch(probe(tmp_path, {}, env=task_env))
        assert "zygote" in handle.data
        assert executor.wait_exit(handle, 10).exit_code == 0
    finally:
        executor.close()
    report = json.loads(log_of(tmp_path).splitlines()[-1])
    report["env"].pop("LC_CTYPE", None)  # an interpreter may set it for itself
    assert report["env"] == task_env


def test_close_leaves_running_children_alive(tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
    executor = PreforkExecutor(PY, ["prefork_probe"], env)
    handle = executor.launch(probe(tmp_path, {"action": "sleep"}))
    wait_for_line(tmp_path, "ready")
    executor.close()
    plain = None
    try:
        assert os.getpgid(handle.pid) == handle.pid
        plain = executor.launch(probe(tmp_path, {}))
        assert "process" in plain.data  # closed: plain processes
    finally:
        os.killpg(handle.pid, signal.SIGKILL)
        assert handle.data["containment"].end()
        if plain is not None:  # its cgroup, like any launch's, goes with it
            assert executor.wait_exit(plain, 10) is not None
            assert plain.data["containment"].end()


def test_workers_without_limits_start_from_a_standby_already_in_their_cgroup(executor, tmp_path):
    deadline = time.monotonic() + 10
    zygote = executor._ensure_zygote()
    while not zygote._ready:  # a standby joins its spare cgroup after start-up
        assert time.monotonic() < deadline
        time.sleep(0.01)
    spare = zygote._ready[0]
    run = f"standby-{uuid.uuid4().hex[:8]}"  # cgroups are machine-wide: names must not repeat
    handles = [executor.launch(probe(tmp_path, {"action": "sleep"},
                                     labels={"runyard.run_id": f"{run}-{n}"}))
               for n in range(2)]  # fmt: skip
    assert handles[0].data["containment"].cgroup.name == f"runyard-task-{run}-0"
    assert not Path(f"/sys/fs/cgroup/freezer/{spare}").exists()  # renamed, not joined
    for n, handle in enumerate(handles):  # the second one may come before a new standby
        memberships = ""
        while f"freezer:/runyard-task-{run}-{n}\n" not in memberships:
            assert time.monotonic() < deadline, memberships
            memberships = Path(f"/proc/{handle.pid}/cgroup").read_text()
            time.sleep(0.01)
        executor.cancel(handle, grace_seconds=2)
        assert executor.wait_exit(handle, 10).exit_code == -signal.SIGTERM
        assert not Path(f"/sys/fs/cgroup/freezer/runyard-task-{run}-{n}").exists()


def test_standbys_are_kept_ready_and_forked_in_batches(executor, tmp_path):
    """STANDBYS children wait in spare cgroups of their own; launches take them oldest
    first, and the ones taken are forked again together, when one is left (the zygote's
    own pages are copied once a batch, not once a launch)."""
    zygote = executor._ensure_zygote()
    deadline = time.monotonic() + 10
    while len(zygote._ready) < STANDBYS:
        assert time.monotonic() < deadline, zygote._ready
        time.sleep(0.01)
    standbys = {}
    for spare in zygote._ready:
        pids = Path(f"/sys/fs/cgroup/freezer/{spare}/cgroup.procs").read_text().split()
        assert len(pids) == 1, (spare, pids)
        standbys[int(pids[0])] = spare
    for pid in standbys:  # its request pipe, not the others' (they would outlive the zygote)
        fds = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        assert len([fd for fd in fds if fd.startswith("pipe:")]) == 1, fds
    run = f"batch-{uuid.uuid4().hex[:8]}"
    handles = []
    for n in range(STANDBYS - 1):
        labels = {"runyard.run_id": f"{run}-{n}"}
        handles.append(executor.launch(probe(tmp_path, {"action": "sleep"}, labels=labels)))
        if n < STANDBYS - 2:  # no refill while more than one is left
            assert len(zygote._spares) == STANDBYS - 1 - n
    assert len(zygote._spares) == STANDBYS  # the taken ones, asked for in one batch
    assert [handle.pid for handle in handles] == list(standbys)[: STANDBYS - 1]
    try:
        while len(zygote._ready) < STANDBYS:
            assert time.monotonic() < deadline, zygote._ready
            time.sleep(0.01)
        left = list(standbys.values())[-1]  # the one not taken, and new ones
        assert set(zygote._ready) & set(standbys.values()) == {left}
    finally:
        for handle in handles:
            executor.cancel(handle, grace_seconds=2)
            assert executor.wait_exit(handle, 10).exit_code == -signal.SIGTERM


def test_no_standbys_where_cgroups_cannot_be_renamed(tmp_path):
    """A standby's spare becomes its run's cgroup by a rename, which cgroup2 refuses: there
    a standby could never be taken, so none is forked and no spare is made."""
    folder = tmp_path / "cgroup2"
    folder.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
    host = CgroupHost("cgroup2", {"": folder}, frozenset())
    executor = PreforkExecutor(PY, ["json"], env, containment=Containment(host))
    try:
        executor.start()  # a started zygote asks for its first standbys
        zygote = executor._ensure_zygote()
        assert zygote is not None and zygote.alive
        zygote.refill(executor.containment)
        assert zygote._spares == {}
        assert list(folder.iterdir()) == []
    finally:
        executor.close()


def test_spares_left_by_an_ended_launcher_are_swept_and_live_ones_kept():
    """A server killed with its standbys leaves their spare cgroups, empty: a launcher
    starting removes those, never one with a process inside nor one just made (another
    server's standby may be on its way into it)."""
    host = detect_host()
    assert host is not None, "the launcher's tests run where cgroups are writable"
    tag = uuid.uuid4().hex[:8]
    left, occupied, fresh = (host.create(f"{SPARE_PREFIX}{kind}-{tag}", Limits())
                             for kind in ("left", "occupied", "fresh"))  # fmt: skip
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        occupied.add(sleeper.pid)
        hour_ago = time.time() - 3600
        for group in (left, occupied):
            for folder in group.folders.values():
                os.utime(folder, (hour_ago, hour_ago))
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
        executor = PreforkExecutor(PY, ["prefork_probe"], env)
        executor.start()
        executor.close()
        assert not left.exists()
        assert occupied.exists() and occupied.pids() == {sleeper.pid}
        assert fresh.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        for group in (left, occupied, fresh):
            group.remove()


def test_a_restart_right_after_a_crash_sweeps_the_spares_of_the_ended_launcher():
    """A spare is named by the process that made it; once that process has ended, its
    spares go at the next launcher's start, however new. One named by a live process, by a
    pid of another pid namespace, or by nobody (an older version's) waits out its age."""
    host = detect_host()
    assert host is not None, "the launcher's tests run where cgroups are writable"
    namespace = os.stat("/proc/self/ns/pid").st_ino
    ended = subprocess.Popen(["sleep", "60"])
    started = process_start_time(ended.pid)
    ended.kill()
    ended.wait()
    live = subprocess.Popen(["sleep", "60"])
    tag = uuid.uuid4().hex
    names = {
        "ended": f"{namespace}-{ended.pid}-{started}-{tag}",
        "live": f"{namespace}-{live.pid}-{process_start_time(live.pid)}-{tag}",
        "elsewhere": f"{namespace + 1}-{ended.pid}-{started}-{tag}",
        "reused pid": f"{namespace}-{live.pid}-{process_start_time(live.pid) + 1}-{tag}",
        "nameless": f"nobody-{tag}",
    }
    groups = {kind: host.create(SPARE_PREFIX + name, Limits()) for kind, name in names.items()}
    try:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
        executor = PreforkExecutor(PY, ["prefork_probe"], env)
        executor.start()
        executor.close()
        gone = {kind for kind, group in groups.items() if not group.exists()}
        assert gone == {"ended", "reused pid"}
    finally:
        live.kill()
        live.wait()
        for group in groups.values():
            group.remove()


def warmed_by(warm: str, log: Path) -> PreforkExecutor:
    """An executor whose zygote preloads the probe and then calls ``warm``; its log at ``log``."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
    return PreforkExecutor(PY, ["prefork_probe"], env, log_path=log, warm=warm)


def test_a_warm_up_that_fails_is_reported_and_the_zygote_forks_unwarmed(tmp_path):
    log = tmp_path / "prefork.log"
    executor = warmed_by("prefork_probe:warm_fails", log)
    try:
        handle = executor.launch(probe(tmp_path, {"code": 4}))
        assert "process" not in handle.data  # forked by the zygote
        assert executor.wait_exit(handle, 10).exit_code == 4
        errors = handle.data["zygote"].preload_errors
    finally:
        executor.close()
    assert errors == {"prefork_probe:warm_fails": "ValueError: no warm-up today"}
    assert "warm-up prefork_probe:warm_fails failed: ValueError" in log.read_text()


@pytest.mark.parametrize("warm", ["warm_leaves_a_thread", "warm_leaves_a_bare_thread"])
def test_a_warm_up_that_leaves_a_thread_makes_the_zygote_refuse_to_fork(tmp_path, warm):
    log = tmp_path / "prefork.log"
    executor = warmed_by(f"prefork_probe:{warm}", log)
    try:
        spec = probe(tmp_path, {"code": 5}, env={"PYTHONPATH": str(HERE)})
        handle = executor.launch(spec)
        assert "process" in handle.data  # a plain process: forking a threaded zygote is unsafe
        assert executor.wait_exit(handle, 10).exit_code == 5
    finally:
        executor.close()
    assert "a thread of the warm-up still runs; not forking" in log.read_text()


def test_a_spawn_asked_for_during_a_batch_of_standbys_is_served_before_the_rest_of_it(
    tmp_path,
):
    """Standbys come in batches, forked back to back; a launch asked for meanwhile is
    served before the batch's next fork, not after its last one. Counted in messages: the
    standbys reported ready between the spawn request and its answer."""
    ours, theirs = socket.socketpair()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(HERE)}
    zygote = subprocess.Popen(
        [PY, "-m", "runyard.executors.zygote", str(theirs.fileno())],
        pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    theirs.close()
    replies = ours.makefile("rb")

    def send(message: dict) -> None:
        ours.sendall(json.dumps(message).encode() + b"\n")

    def reply() -> dict:
        line = replies.readline()
        assert line, "the zygote closed its socket"
        return json.loads(line)

    batch = 100
    try:
        ours.settimeout(60)
        send({"op": "preload", "modules": ["json", "prefork_probe"], "warm": None})
        assert reply()["op"] == "ready"
        send({"op": "standby", "standbys": [
            {"name": f"batch-{n}", "cgroup_procs": []} for n in range(batch)
        ]})  # fmt: skip
        first = reply()  # the batch is under way (its standbys get ready in any order)
        assert first["op"] == "standby-ready" and first["name"].startswith("batch-")
        send({
            "op": "spawn", "id": 1, "standby": None, "module": "prefork_probe", "args": [],
            "env": env, "cwd": None, "log_path": str(tmp_path / "probe.log"),
            "stdin": base64.b64encode(b'{"action": "report"}').decode(),
            "cgroup_procs": [], "rlimits": [],
        })  # fmt: skip
        ready_meanwhile = 0
        while (message := reply())["op"] != "spawned":
            assert message["op"] == "standby-ready", message
            ready_meanwhile += 1
        assert ready_meanwhile < batch // 2, f"{ready_meanwhile} standbys came first"
        while ready_meanwhile < batch - 1:  # the rest of the batch still comes
            message = reply()
            if message["op"] == "standby-ready":
                ready_meanwhile += 1
    finally:
        replies.close()
        ours.close()  # the zygote exits; its standbys read the end of their pipes and exit
        zygote.wait(30)
    log = tmp_path / "probe.log"
    deadline = time.monotonic() + 10
    while '"argv": ["prefork_probe"]' not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the spawned child did not run"
        time.sleep(0.01)


def _ready_standby(executor: PreforkExecutor) -> str:
    zygote = executor._ensure_zygote()
    assert zygote is not None
    deadline = time.monotonic() + 10
    while not zygote._ready:  # a standby joins its spare cgroup after start-up
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return zygote._ready[0]


def test_a_launch_on_a_standby_does_not_wait_for_the_zygote_to_pass_it_on(executor, tmp_path):
    """The standby is the run's process, its pid known when it was ready: the launch
    returns at once, and the zygote passes the request on when it can."""
    _ready_standby(executor)
    launcher = executor._ensure_zygote()._proc.pid
    run = f"nowait-{uuid.uuid4().hex[:8]}"
    os.kill(launcher, signal.SIGSTOP)  # it reads no request until it goes on
    try:
        started = time.monotonic()
        handle = executor.launch(probe(tmp_path, {}, labels={"runyard.run_id": run}))
        took = time.monotonic() - started
    finally:
        os.kill(launcher, signal.SIGCONT)
    assert took < 2.0, f"the launch waited {took:.2f} s for the zygote"
    assert executor.wait_exit(handle, 10).exit_code == 0
    wait_for_line(tmp_path, '"pid"')
    assert json.loads(log_of(tmp_path).splitlines()[-1])["pid"] == handle.pid


def test_a_standby_dead_before_its_run_ends_that_run_and_nothing_runs_it_instead(
    executor, tmp_path
):
    """A standby killed while it waits: the run launched on it ends with that process's
    exit; the zygote does not fork another process in its place (the run's pid is the
    standby's, which its supervisor already follows)."""
    name = _ready_standby(executor)
    zygote = executor._ensure_zygote()
    standby = zygote._standby_pids[name]
    os.kill(standby, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while zygote.exit_code(standby) is None:  # reaped and reported by the zygote
        assert time.monotonic() < deadline
        time.sleep(0.01)
    run = f"dead-{uuid.uuid4().hex[:8]}"
    handle = executor.launch(probe(tmp_path, {}, labels={"runyard.run_id": run}))
    assert handle.pid == standby
    assert executor.wait_exit(handle, 10).exit_code == -signal.SIGKILL
    time.sleep(0.5)
    assert log_of(tmp_path) == "", "another process ran the request"
    assert not Path(f"/sys/fs/cgroup/freezer/runyard-task-{run}").exists()


def test_a_run_cancelled_before_its_standby_made_its_group_still_gets_sigterm(
    executor, tmp_path
):
    """A standby makes its own process group (``setsid``) only when it reads its request.
    A cancel that comes first finds no group led by the run's pid: the SIGTERM goes to the
    process alone, so the run still ends by it, within its grace, not by the cgroup's
    SIGKILL. The standby is held stopped here until after the SIGTERM is sent."""
    name = _ready_standby(executor)
    standby = executor._ensure_zygote()._standby_pids[name]
    os.kill(standby, signal.SIGSTOP)  # it cannot read its request, nor make its group
    run = f"early-{uuid.uuid4().hex[:8]}"
    handle = executor.launch(probe(tmp_path, {"action": "sleep"}, labels={"runyard.run_id": run}))
    assert handle.pid == standby and os.getpgid(standby) != standby
    waker = threading.Timer(0.5, _continue, (standby,))
    waker.start()
    try:
        executor.cancel(handle, grace_seconds=10)
    finally:
        waker.join()
    assert executor.wait_exit(handle, 10).exit_code == -signal.SIGTERM
    assert log_of(tmp_path) == "", "the run's code ran after its cancel"
    assert not Path(f"/sys/fs/cgroup/freezer/runyard-task-{run}").exists()


def _continue(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed already, say by its cgroup
        os.kill(pid, signal.SIGCONT)
