"""Retry policies: a task class's defaults (a submit's values win), their bounds, and the
backoff between attempts; through a real supervisor with real workers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from retry_test_tasks import Flaky
from runtime_helpers import wait_until

from runyard.config import Settings
from runyard.errors import InvalidInput
from runyard.kubernetes_settings import KubernetesSettings
from runyard.runtime.dependencies import upstream_verdict
from runyard.runtime.liveness import request_cancel
from runyard.runtime.retries import backoff_seconds
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.base import describe
from runyard.tasks.registry import TaskRegistry
from runyard.tasks.retrypolicy import MAX_DELAY_SECONDS, resolve_policy
from runyard.workspace.history import kept_runs
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus, utcnow


@pytest.fixture
def registry(registry: TaskRegistry) -> TaskRegistry:
    registry.add("flaky", "retry_test_tasks:Flaky", plugin="tests")
    assert not registry.errors, registry.errors
    return registry


def ended(workspace: Workspace, task_id: str) -> TaskStatus:
    found: list[TaskStatus] = []

    def final() -> bool:
        status = workspace.read_status(task_id)
        if status is None or not status.terminal or status.attempt is None:
            return False
        if status.state == "failed" and status.attempt <= (status.retries or 0):
            return False  # its retry is being made
        found.append(status)
        return True

    wait_until(final, timeout=30)
    return found[0]


def test_a_task_class_default_retries_its_failed_runs(
    supervisor: Supervisor, workspace: Workspace, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    handle = supervisor.submit("flaky", {"counter": str(counter), "succeed_on": 3})
    final = ended(workspace, handle.task_id)
    assert final.state == "succeeded" and final.attempt == 3 and final.retries == 2
    assert final.retry_delay_seconds == Flaky.retry_delay_seconds
    assert counter.read_text() == "3"
    # what the failed attempts left in the folder went before the next one ran
    left = sorted(p.name for p in workspace.task_dir(handle.task_id).glob("attempt-*"))
    assert left == ["attempt-3.txt"]
    kept = kept_runs(workspace, handle.task_id)
    assert [(s.state, s.attempt) for s in kept] == [("failed", 2), ("failed", 1)]
    assert all("attempt" in s.error and s.error for s in kept)


def test_a_submit_s_retries_win_over_the_class_default(
    supervisor: Supervisor, workspace: Workspace, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    none = supervisor.submit("flaky", {"counter": str(counter)}, retries=0)
    wait_until(lambda: (s := workspace.read_status(none.task_id)) is not None and s.terminal)
    final = workspace.read_status(none.task_id)
    assert final is not None and final.state == "failed" and final.attempt is None
    assert counter.read_text() == "1" and kept_runs(workspace, none.task_id) == []

    more = tmp_path / "more"
    handle = supervisor.submit("flaky", {"counter": str(more), "succeed_on": 4}, retries=3)
    last = ended(workspace, handle.task_id)
    assert last.state == "succeeded" and last.attempt == 4 and more.read_text() == "4"


def test_bounds_refuse_a_submit_before_anything_is_made(
    supervisor: Supervisor, workspace: Workspace, tmp_path: Path
) -> None:
    for retries, delay in ((21, None), (-1, None), (True, None), (1, -1.0), (1, 3601.0),
                           (1, float("nan")), (1, float("inf"))):  # fmt: skip
        with pytest.raises(InvalidInput):
            supervisor.submit("flaky", {"counter": str(tmp_path / "x")}, retries=retries,
                              retry_delay_seconds=delay)  # fmt: skip
    assert list(workspace.iter_task_dirs()) == []


def test_a_task_class_with_defaults_out_of_bounds_is_refused() -> None:
    class TooMany(Flaky):
        """Retried too often."""

        retries = 21

    class TooSlow(Flaky):
        """Waits too long."""

        retry_delay_seconds = 7200.0

    for task_cls in (TooMany, TooSlow):
        with pytest.raises(TypeError, match="retr"):
            describe(task_cls, "bad", "tests")
    assert resolve_policy(Flaky).retries == 2
    assert resolve_policy(Flaky, retries=0).retries == 0


@pytest.mark.parametrize(
    ("delay", "attempt", "jitter", "expected"),
    [
        (10.0, 1, 0.0, 10.0),
        (10.0, 2, 0.0, 20.0),
        (10.0, 4, 0.0, 80.0),
        (10.0, 1, 1.0, 11.0),
        (10.0, 1, -1.0, 9.0),
        (10.0, 20, 0.0, MAX_DELAY_SECONDS),
        (10.0, 20, 1.0, MAX_DELAY_SECONDS),
        (0.0, 5, 1.0, 0.0),
    ],
)
def test_the_backoff_doubles_with_jitter_and_is_capped(
    delay: float, attempt: int, jitter: float, expected: float
) -> None:
    assert backoff_seconds(delay, attempt, jitter) == pytest.approx(expected)


def test_the_jitter_spreads_waits_within_ten_percent() -> None:
    waits = {backoff_seconds(10.0, 2) for _ in range(200)}
    assert len(waits) > 100 and min(waits) >= 18.0 and max(waits) <= 22.0


def test_a_task_without_retries_keeps_the_seed_shape(
    make_supervisor: Callable[..., Supervisor], workspace: Workspace
) -> None:
    """A task class without retries: statuses keep the seed's shape."""
    sup = make_supervisor()
    handle = sup.submit("exitwith", {"code": 3})
    wait_until(lambda: (s := workspace.read_status(handle.task_id)) is not None and s.terminal)
    raw = workspace.status_path(handle.task_id).read_text()
    assert '"attempt"' not in raw and '"retries"' not in raw


def test_an_attempt_that_failed_unwatched_while_cancelled_ends_cancelled_at_the_next_start(
    make_supervisor: Callable[..., Supervisor], workspace: Workspace, tmp_path: Path
) -> None:
    """Its cancel came as it failed: the retry made at the next start ends ``cancelled`` at
    once, so no attempt runs and nothing looks as if a retry were still to come."""
    counter = tmp_path / "tries"
    handle = make_supervisor(start=False).submit("flaky", {"counter": str(counter)}, retries=2)
    queued = workspace.read_status(handle.task_id)
    assert queued is not None and queued.attempt == 1
    failed = queued.model_copy(update={
        "state": TaskState.FAILED, "started_at": utcnow(), "finished_at": utcnow(), "exit_code": 1,
        "error": "RuntimeError: attempt 1 fails"})  # fmt: skip
    workspace.write_status(failed)
    request_cancel(workspace, handle.task_id, handle.run_id)
    make_supervisor()
    final = workspace.read_status(handle.task_id)
    assert final is not None and final.state == "cancelled" and final.attempt == 2
    assert final.started_at is None and not counter.exists()
    assert [(s.state, s.run_id) for s in kept_runs(workspace, handle.task_id)] == [
        ("failed", handle.run_id)
    ]


def test_an_attempt_that_failed_unwatched_is_retried_at_the_next_start(
    make_supervisor: Callable[..., Supervisor], workspace: Workspace, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    counter.write_text("1")  # attempt 1 ran (and failed) while no supervisor watched
    handle = make_supervisor(start=False).submit("flaky", {"counter": str(counter)}, retries=2)
    queued = workspace.read_status(handle.task_id)
    assert queued is not None
    workspace.write_status(queued.model_copy(update={
        "state": TaskState.FAILED, "started_at": utcnow(), "finished_at": utcnow(), "exit_code": 1,
        "error": "RuntimeError: attempt 1 fails"}))  # fmt: skip
    make_supervisor()
    final = ended(workspace, handle.task_id)
    assert final.state == "succeeded" and final.attempt == 3 and counter.read_text() == "3"


def test_a_failed_attempt_with_retries_left_keeps_its_dependents_waiting(
    make_supervisor: Callable[..., Supervisor], workspace: Workspace, tmp_path: Path
) -> None:
    """Read between the attempt's end and its retry (or while no server runs): only the
    last attempt's failure fails the dependents."""
    sup = make_supervisor(start=False)
    up = sup.submit("flaky", {"counter": str(tmp_path / "tries")}, retries=1)
    down = sup.submit("exitwith", {"code": 0}, depends_on=[up.task_id])
    waiting = workspace.read_status(down.task_id)
    queued = workspace.read_status(up.task_id)
    assert waiting is not None and queued is not None
    for attempt, verdict in ((1, "waiting"), (2, f"upstream failed: {up.task_id} (failed)")):
        workspace.write_status(queued.model_copy(update={
            "state": TaskState.FAILED, "attempt": attempt, "finished_at": utcnow(),
            "exit_code": 1, "error": "RuntimeError: it fails"}))  # fmt: skip
        assert upstream_verdict(workspace, waiting) == verdict


def test_a_retry_waiting_at_a_stop_waits_out_its_time_under_the_next_supervisor(
    make_supervisor: Callable[..., Supervisor], workspace: Workspace, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    first = make_supervisor()
    handle = first.submit(
        "flaky", {"counter": str(counter), "succeed_on": 2}, retries=1, retry_delay_seconds=5
    )
    wait_until(lambda: (s := workspace.read_status(handle.task_id)) is not None and s.attempt == 2)
    waiting = workspace.read_status(handle.task_id)
    assert waiting is not None and waiting.state == "queued" and waiting.retry_at
    first.stop()
    make_supervisor()  # a restart: the queued status on disk is all it has
    final = ended(workspace, handle.task_id)
    assert final.state == "succeeded" and final.run_id == waiting.run_id
    assert final.started_at is not None and final.started_at >= waiting.retry_at


def test_retries_are_refused_on_kubernetes_and_a_class_default_is_not_applied_there(
    settings: Settings, workspace: Workspace, registry: TaskRegistry, tmp_path: Path
) -> None:
    pytest.importorskip("kubernetes")
    sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
    from k8s_cluster import write_kubeconfig
    from k8s_fake_api import FakeKubernetes

    fake = FakeKubernetes().start()
    try:
        k8s = KubernetesSettings(
            image="registry.example/runyard:1", request_timeout_seconds=5,
            kubeconfig=str(write_kubeconfig(fake, tmp_path / "kubeconfig")),
            node_selector={"kubernetes.io/hostname": "test-node"},
        )  # fmt: skip
        supervisor = Supervisor(
            settings.model_copy(update={"kubernetes": k8s}), workspace, registry
        )
        inputs = {"counter": str(tmp_path / "tries")}
        with pytest.raises(InvalidInput, match="retries"):
            supervisor.submit("flaky", inputs, executor="kubernetes", retries=2)
        assert not list(workspace.root.rglob("status.json"))
        handle = supervisor.submit("flaky", inputs, executor="kubernetes")  # class default: 2
        status = workspace.read_status(handle.task_id)
        assert status is not None and status.attempt is None and status.retries is None
        supervisor.stop()
    finally:
        fake.stop()
