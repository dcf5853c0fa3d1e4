"""The one exit-watching module as the supervisor's agent runs use it: a recycled PID is never
taken for a recorded run, and a slow Kubernetes API never holds up the monitor thread."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runyard.config import Settings
from runyard.executors.base import LaunchSpec, Limits, Mount
from runyard.executors.local import LocalExecutor, terminate_group
from runyard.executors.pidwatch import ExitMonitor, is_alive, process_start_time, wait_exit
from runyard.runtime.agentruns import KEY_PREFIX, AgentRuns

pytest.importorskip("kubernetes")
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_fake_api import FakeKubernetes  # noqa: E402
from kubernetes.client import ApiClient, Configuration  # noqa: E402

from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings  # noqa: E402
from runyard.executors.kubernetes.names import RUN_ID_LABEL  # noqa: E402

JOB = "runyard-run-1"


class Host:
    """The supervisor's side AgentRuns needs: the one monitor thread."""

    def __init__(self) -> None:
        self.runs: AgentRuns | None = None
        self.monitor = ExitMonitor(self._on_exit)

    def _on_exit(self, key: str, pidfd: int | None) -> None:
        if self.runs is not None:
            self.runs.exited(key.removeprefix(KEY_PREFIX))

    def exit_monitor(self) -> ExitMonitor | None:
        return self.monitor


class StallingKubernetes(FakeKubernetes):
    """The fake API server, whose Job reads can be made to hang (a slow API server)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def handle(self, method: str, kind: str, ns: str, name: str | None, query: dict[str, str],
               body: Any) -> dict[str, Any]:  # fmt: skip
        if self.stall.is_set() and method == "GET" and kind == "Job" and name is not None:
            self.stalled.set()
            self.release.wait(20)
        return super().handle(method, kind, ns, name, query, body)


@pytest.fixture
def unrelated() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not ours to stop: it leads a process group of its own."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def settings(tmp_path: Path) -> Settings:
    return Settings(workspace_dir=tmp_path / "ws", log_dir=tmp_path / "logs",
                    cancel_grace_seconds=0.5)  # fmt: skip


def test_a_recorded_pid_now_naming_another_process_is_neither_adopted_nor_signalled(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    start = process_start_time(unrelated.pid)
    assert start is not None and is_alive(unrelated.pid, start)
    recycled = start - 1  # the run recorded this pid when another process had it
    host = Host()
    runs = AgentRuns(settings(tmp_path), LocalExecutor(), host, lambda *_: None)
    host.runs = runs
    record = {"pid": unrelated.pid, "startTime": recycled}
    try:
        assert not runs.adopt("run-1", "s-1", record, tmp_path / "exit-code", time.monotonic())
        assert not runs.watched("run-1") and not runs.cancel("run-1")
        assert not terminate_group(unrelated.pid, 0.5, recycled)
        assert wait_exit(unrelated.pid, 0.3, recycled)  # "ended": not the recorded process
        assert not wait_exit(unrelated.pid, 0.3, start)  # the real one runs on
        assert unrelated.poll() is None
    finally:
        runs.close()
    # the same record with the right start time is the run: adopted, and cancel stops it
    host.monitor.start()
    runs = AgentRuns(settings(tmp_path), LocalExecutor(), host, lambda *_: None)
    host.runs = runs
    try:
        record["startTime"] = start
        assert runs.adopt("run-1", "s-1", record, tmp_path / "exit-code", time.monotonic() + 60)
        assert runs.cancel("run-1")
        assert unrelated.wait(5) == -15
    finally:
        runs.close()
        host.monitor.stop()


def pod_spec(tmp_path: Path) -> LaunchSpec:
    workspace = tmp_path / "run-1"
    workspace.mkdir()
    return LaunchSpec(
        argv=["python", "-c", "print('hi')"],
        log_path=tmp_path / "logs" / "run-1.log",
        env={"MODE": "test"},
        mounts=[Mount(workspace, "/workspace")],
        labels={RUN_ID_LABEL: "run-1", "session": "s-1"},
        limits=Limits(timeout_seconds=60),
        network=False,
    )


def test_a_hanging_pod_poll_does_not_hold_up_the_monitor_and_the_end_is_claimed_once(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    fake = StallingKubernetes().start()
    k8s = KubernetesSettings(image="registry.example/agent:1", request_timeout_seconds=30,
                             log_retry_seconds=0.05, log_drain_seconds=1, node_name="n1")  # fmt: skip
    # polled through the API, not the watch's cache: the Job read is what hangs
    executor = KubernetesExecutor(k8s, ApiClient(Configuration(host=fake.url)), watching=False)
    host = Host()
    ends: list[tuple[str, int | None, str]] = []
    runs = AgentRuns(settings(tmp_path), executor, host, lambda *end: ends.append(end))
    host.runs = runs
    host.monitor.start()
    try:
        runs.watch(runs.launch("run-1", "s-1", pod_spec(tmp_path), tmp_path / "x", 60))
        fake.start_container(JOB)
        record = {"pid": unrelated.pid, "startTime": process_start_time(unrelated.pid)}
        assert runs.adopt("run-2", "s-1", record, tmp_path / "none", time.monotonic() + 60)
        fake.stall.set()
        assert fake.stalled.wait(10), "the pod was never polled"
        # a pod poll hangs in the API: the monitor thread still runs everything else at once
        ticked = threading.Event()
        host.monitor.call_later(0.0, ticked.set)
        assert ticked.wait(2), "the monitor thread waits for the pod's API call"
        # ... and a process run's exit is reported meanwhile (no lock is held over the call)
        unrelated.kill()
        deadline = time.monotonic() + 2
        while not ends and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ends == [("run-2", None, "")], "a process exit waits for the pod's API call"
        fake.terminate(JOB, 3)
        fake.stall.clear()
        fake.release.set()
        deadline = time.monotonic() + 10
        while len(ends) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ends[1:] == [("run-1", 3, "")]
        assert runs.claim("run-1") is None and not runs.watched("run-1")
        time.sleep(1.5)  # a poll after the claim would report it again
        assert len(ends) == 2
    finally:
        fake.release.set()
        runs.close()
        host.monitor.stop()
        executor.close()
        fake.stop()


def test_a_pods_job_stays_until_its_end_is_recorded(tmp_path: Path) -> None:
    # a server that dies between seeing the end and recording it must find the Job again
    fake = FakeKubernetes().start()
    k8s = KubernetesSettings(image="registry.example/agent:1", request_timeout_seconds=30,
                             log_retry_seconds=0.05, log_drain_seconds=1, node_name="n1")  # fmt: skip
    executor = KubernetesExecutor(k8s, ApiClient(Configuration(host=fake.url)))
    host = Host()
    seen: list[tuple[str, int | None, bool]] = []

    def record_end(run_id: str, code: int | None, reason: str) -> None:
        seen.append((run_id, code, "Job" in fake.kinds_named(JOB)))

    runs = AgentRuns(settings(tmp_path), executor, host, record_end)
    host.runs = runs
    host.monitor.start()
    try:
        runs.watch(runs.launch("run-1", "s-1", pod_spec(tmp_path), tmp_path / "x", 60))
        fake.start_container(JOB)
        fake.terminate(JOB, 0)
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen == [("run-1", 0, True)], "the Job went before the end was recorded"
        assert "Job" in fake.kinds_named(JOB)
        runs.release("run-1")  # the end is on record: now the Job goes
        deadline = time.monotonic() + 10
        while "Job" in fake.kinds_named(JOB) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "Job" not in fake.kinds_named(JOB)
    finally:
        runs.close()
        host.monitor.stop()
        executor.close()
        fake.stop()
