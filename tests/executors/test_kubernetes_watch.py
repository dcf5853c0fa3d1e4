"""Polls answered from one watch per kind, through the real ``kubernetes`` client against
the fake API server: no requests per run, ends seen at once, 410 Gone and lost connections
survived, a deleted Job read as gone."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from k8s_fake_api import FakeKubernetes
from kubernetes.client import ApiClient, Configuration

from runyard.executors.base import Handle, LaunchSpec, Mount
from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings
from runyard.executors.kubernetes.api import KubeApi
from runyard.executors.kubernetes.names import INSTANCE_LABEL, RUN_ID_LABEL, resource_name
from runyard.executors.kubernetes.retry import RetryPolicy
from runyard.executors.kubernetes.status import vanished
from runyard.executors.kubernetes.watch import RunWatch

INSTANCE = "ry-watch"
STEADY_SECONDS = 3.0


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


@pytest.fixture
def make_executor(fake: FakeKubernetes) -> Iterator[Callable[..., KubernetesExecutor]]:
    made: list[KubernetesExecutor] = []

    def make(watching: bool = True) -> KubernetesExecutor:
        settings = KubernetesSettings(
            image="registry.example/agent:1", node_name="node-a", instance=INSTANCE,
            log_retry_seconds=0.05, log_drain_seconds=1, request_timeout_seconds=5,
            retry_base_seconds=0.01, retry_max_seconds=2,
        )  # fmt: skip
        executor = KubernetesExecutor(settings, ApiClient(Configuration(host=fake.url)),
                                      sweeping=False, watching=watching)  # fmt: skip
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.close()


def eventually(check: Callable[[], Any], timeout: float = 5.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        time.sleep(0.01)
    return found


def launch(executor: KubernetesExecutor, tmp_path: Path, run_id: str) -> Handle:
    workspace = tmp_path / run_id
    workspace.mkdir()
    spec = LaunchSpec(argv=["python", "-m", "agent"], log_path=tmp_path / "logs" / f"{run_id}.log",
                      mounts=[Mount(workspace, "/workspace")], labels={RUN_ID_LABEL: run_id})  # fmt: skip
    return executor.launch(spec)


def synced(executor: KubernetesExecutor) -> RunWatch:
    watch = executor.watch
    assert watch is not None
    eventually(watch.synced, what="the watch's first lists")
    return watch


def cached_condition(watch: RunWatch, job_name: str) -> str:
    job = watch.job(job_name) or {}
    conditions = (job.get("status") or {}).get("conditions") or [{}]
    return str(conditions[0].get("type") or "")


def started_runs(
    fake: FakeKubernetes, executor: KubernetesExecutor, tmp_path: Path, count: int
) -> list[Handle]:
    """``count`` runs whose containers run and whose log streams are open (the only
    request a running pod costs), each seen by one poll."""
    handles = []
    for n in range(count):  # started at once: a waiting pod's log is asked for again and again
        handles.append(launch(executor, tmp_path, f"run-{n}"))
        fake.start_container(resource_name(f"run-{n}"))
    assert all(executor.poll(handle) is None for handle in handles)

    def log_streams_settled() -> bool:
        before = fake.request_counts()[("get", "Pod/log")]
        time.sleep(0.3)
        return before >= count and fake.request_counts()[("get", "Pod/log")] == before

    eventually(log_streams_settled, what="one log stream per running pod")
    return handles


def requests_while_polling(
    fake: FakeKubernetes, executor: KubernetesExecutor, handles: list[Handle]
) -> Counter[tuple[str, str]]:
    """The requests made while every run is polled every 0.5 s for STEADY_SECONDS."""
    before = fake.request_counts()
    deadline = time.monotonic() + STEADY_SECONDS
    while time.monotonic() < deadline:
        assert all(executor.poll(handle) is None for handle in handles)
        time.sleep(0.5)
    return fake.request_counts() - before


def test_polling_many_runs_costs_no_request_per_run_and_an_end_is_seen_at_once(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    executor = make_executor()
    changed: list[tuple[str, float]] = []
    executor.on_change(lambda run_id: changed.append((run_id, time.monotonic())))
    synced(executor)
    handles = started_runs(fake, executor, tmp_path, 50)

    made = requests_while_polling(fake, executor, handles)
    # 300 polls of 50 runs: at most the watches' own renewals, whatever the number of runs
    assert sum(made.values()) <= 4, made
    assert set(made) <= {("watch", "Job"), ("watch", "Pod")}, made

    ended = time.monotonic()
    fake.terminate(resource_name("run-7"), 3)
    seen = eventually(lambda: [at for run_id, at in changed if run_id == "run-7" and at >= ended],
                      timeout=2, what="the change callback of the run that ended")  # fmt: skip
    assert seen[0] - ended < 1.0
    info = eventually(lambda: executor.poll(handles[7]), timeout=2, what="the end in a poll")
    assert info.exit_code == 3


def test_a_failed_job_seen_before_its_pod_ended_reads_the_exit_code_from_the_api(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    """Jobs and pods come on two watch streams: the Job's failure can be seen first. The
    run's end then names the container's exit code, not 255 for "no code known"."""
    executor = make_executor()
    watch = synced(executor)
    handle = launch(executor, tmp_path, "run-late")
    fake.start_container(resource_name("run-late"))
    assert executor.poll(handle) is None
    fake.terminate(resource_name("run-late"), 3, pod_event=False)
    eventually(lambda: cached_condition(watch, resource_name("run-late")) == "Failed",
               what="the watch to see the Job fail")  # fmt: skip
    info = executor.poll(handle)
    assert info is not None
    assert info.exit_code == 3, info


def test_a_410_gone_lists_again_and_sees_a_job_that_ended_while_the_watch_was_broken(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    executor = make_executor()
    watch = synced(executor)
    handles = [launch(executor, tmp_path, run_id) for run_id in ("run-a", "run-b")]
    eventually(lambda: watch.job(resource_name("run-b")), what="both Jobs in the cache")
    assert (watch.jobs.lists, watch.pods.lists) == (1, 1)
    for how, handle in zip(("event", "http"), handles, strict=True):
        with fake.cond:  # the Job ends while the events about it are compacted away
            fake.terminate(handle.data["job_name"], 7)
            fake.expire_watch_history()
            if how == "http":  # the stream breaks; the watch from that version gets HTTP 410
                fake.gone_as_http = True
                fake.drop_watches()
        eventually(lambda h=handle: cached_condition(watch, h.data["job_name"]) == "Failed",
                   what=f"the cache after a 410 ({how})")  # fmt: skip
        eventually(watch.synced, what="the watch current again")
        assert executor.poll(handle).exit_code == 7  # type: ignore[union-attr]
    assert watch.jobs.lists == 3 and watch.pods.lists == 3
    assert fake.requests_of("GET", "/jobs/runyard-run-") == []  # the ends came from the cache


def test_a_dropped_watch_resumes_from_its_last_version_without_listing_again(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    executor = make_executor()
    watch = synced(executor)
    handle = launch(executor, tmp_path, "run-1")
    fake.start_container("runyard-run-1")
    eventually(lambda: watch.pods_of("run-1") and "running" in str(watch.pods_of("run-1")))
    time.sleep(0.2)  # nothing more to see: the version is the last one sent
    version, lists = watch.jobs.version, fake.request_counts()
    fake.drop_watches()
    fake.terminate("runyard-run-1", 0)
    eventually(lambda: cached_condition(watch, "runyard-run-1") == "Complete", what="the end")
    assert executor.poll(handle).exit_code == 0  # type: ignore[union-attr]
    assert fake.request_counts()[("list", "Job")] == lists[("list", "Job")] == 1
    assert (watch.jobs.lists, watch.pods.lists) == (1, 1)
    resumed = [r for r in fake.requests_of("GET", "/jobs") if r.query.get("watch")][-1]
    assert resumed.query["resourceVersion"] == version


def test_a_job_deleted_while_watched_reads_as_gone_or_as_cancelled(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    executor = make_executor()
    watch = synced(executor)
    changed: list[str] = []
    executor.on_change(changed.append)
    deleted, replaced, cancelled = (launch(executor, tmp_path, f"run-{n}") for n in range(3))
    eventually(lambda: watch.job("runyard-run-2"), what="the Jobs in the cache")
    with fake.cond:
        fake._delete("Job", "default", fake.objects[("Job", "default", "runyard-run-0")])
    eventually(lambda: watch.job("runyard-run-0") is None, what="the deletion in the cache")
    assert "run-0" in changed
    assert executor.poll(deleted) == vanished(cancelled=False)
    # a Job of the same name and another uid is not the run's
    with fake.cond:
        fake._delete("Job", "default", fake.objects[("Job", "default", "runyard-run-1")])
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": "runyard-run-1", "labels": {RUN_ID_LABEL: "run-1", INSTANCE_LABEL: INSTANCE,
                                                "app.kubernetes.io/managed-by": "runyard"}},
               "spec": {"template": {"spec": {"containers": []}}}}  # fmt: skip
        fake.add("Job", job, created=datetime.now(UTC))
    eventually(lambda: (watch.job("runyard-run-1") or {}).get("metadata", {}).get("uid")
               not in (None, replaced.data["job_uid"]), what="the new Job in the cache")  # fmt: skip
    assert executor.poll(replaced) == vanished(cancelled=False)
    # cancelled under a slow garbage collector: the lingering Job reads as cancelled at once
    fake.gc_delay = 1.0
    executor.cancel(cancelled, 1)
    assert executor.poll(cancelled) == vanished(cancelled=True)


def test_a_failing_callback_neither_stops_the_watch_nor_the_other_callbacks(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    executor = make_executor()
    watch = synced(executor)

    def broken(run_id: str) -> None:
        raise RuntimeError(f"cannot handle {run_id}")

    seen: list[str] = []
    executor.on_change(broken)
    executor.on_change(seen.append)
    launch(executor, tmp_path, "run-1")
    eventually(lambda: "run-1" in seen, what="the second callback")
    fake.start_container("runyard-run-1")
    fake.terminate("runyard-run-1", 0)
    eventually(lambda: cached_condition(watch, "runyard-run-1") == "Complete", what="the end")
    assert watch.synced()


def test_watches_renew_at_their_timeout_and_bookmarks_move_the_version(
    fake: FakeKubernetes,
) -> None:
    api = KubeApi(ApiClient(Configuration(host=fake.url)), 5, RetryPolicy(3, 0.01, 2))
    watch = RunWatch(api, "default", INSTANCE, watch_seconds=(1, 1))
    watch.start()
    names = {"runyard-k8s-watch-job", "runyard-k8s-watch-pod"}
    try:
        eventually(watch.synced, what="the first lists")
        assert all(t.daemon for t in threading.enumerate() if t.name in names)
        assert names <= {t.name for t in threading.enumerate()}
        listed = watch.jobs.version
        fake.add("ConfigMap", {"metadata": {"name": "other"}}, created=datetime.now(UTC))
        moved = str(fake.version)
        eventually(lambda: watch.jobs.version == moved, what="a bookmark")  # no Job event
        assert listed != moved and watch.jobs.get("other") is None
        eventually(lambda: len([r for r in fake.requests_of("GET", "/jobs")
                                if r.query.get("watch")]) >= 3, what="renewals")  # fmt: skip
        renewed = [r.query for r in fake.requests_of("GET", "/jobs") if r.query.get("watch")]
        assert all(q["timeoutSeconds"] == "1" and q["allowWatchBookmarks"] == "true"
                   and q["labelSelector"] == f"app.kubernetes.io/managed-by=runyard,"
                   f"{INSTANCE_LABEL}={INSTANCE}" for q in renewed)  # fmt: skip
        assert renewed[-1]["resourceVersion"] == moved
        assert fake.request_counts()[("list", "Job")] == 1
    finally:
        watch.close()
    eventually(lambda: not names & {t.name for t in threading.enumerate()}, timeout=2,
               what="the watch threads stopped")  # fmt: skip


class SlowRetry(RetryPolicy):
    """Backoff waits long enough for a test to tell whether one was taken."""

    def delay(self, retry: int, retry_after: float | None) -> float:
        return 30.0


def test_a_410_lists_again_at_once_not_after_a_backoff(fake: FakeKubernetes) -> None:
    api = KubeApi(ApiClient(Configuration(host=fake.url)), 5, SlowRetry(3, 30, 60))
    watch = RunWatch(api, "default", INSTANCE)
    watch.start()
    try:
        eventually(watch.synced, what="the first lists")
        with fake.cond:
            fake.add("ConfigMap", {"metadata": {"name": "other"}}, created=datetime.now(UTC))
            fake.expire_watch_history()
        eventually(lambda: watch.jobs.lists == 2 and watch.synced(), timeout=3,
                   what="the list after the 410")  # fmt: skip
    finally:
        watch.close()
