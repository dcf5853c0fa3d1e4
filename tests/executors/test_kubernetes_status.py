"""Job and pod status mapped to ExitInfo, as pure functions over API dicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runyard.executors.kubernetes.status import (
    NO_EXIT_CODE,
    NOT_STARTED_EXIT_CODE,
    TIMEOUT_EXIT_CODE,
    KubernetesExitInfo,
    job_outcome,
    vanished,
)

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(*conditions: dict[str, str], deadline: int | None = None) -> dict[str, Any]:
    spec = {} if deadline is None else {"activeDeadlineSeconds": deadline}
    return {"metadata": {"name": "runyard-r"}, "spec": spec,
            "status": {"conditions": [{"status": "True", **c} for c in conditions]}}


def pod(state: dict[str, Any], age: float = 5, **status: Any) -> dict[str, Any]:
    containers = [{"name": "worker", "state": state}]
    return {"metadata": {"name": "runyard-r-abcde", "creationTimestamp": stamp(age)},
            "status": {"containerStatuses": containers, **status}}


def outcome(job_dict: dict[str, Any], pods: list[dict[str, Any]], grace: float = 60) -> Any:
    return job_outcome(job_dict, pods, NOW, grace)


def test_pending_and_running_are_none() -> None:
    assert outcome(job(), []) is None
    assert outcome(job(), [pod({"waiting": {"reason": "ContainerCreating"}})]) is None
    assert outcome(job(), [pod({"running": {"startedAt": stamp(1)}})]) is None
    suspended = job({"type": "Suspended", "reason": "JobSuspended"})
    assert outcome(suspended, []) is None


def test_container_exit_code_is_the_answer() -> None:
    done = outcome(job(), [pod({"terminated": {"exitCode": 3, "reason": "Error"}})])
    assert done.info == KubernetesExitInfo(3, "") and not done.stop_job
    assert done.info.describe() == "exit code 3"
    failed_job = job({"type": "Failed", "reason": "BackoffLimitExceeded"})
    assert outcome(failed_job, [pod({"terminated": {"exitCode": 3}})]).info.exit_code == 3
    oom = outcome(job(), [pod({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})]).info
    assert oom.exit_code == 137 and oom.describe() == "exit code 137 (OOMKilled)"


def test_complete_without_a_pod_is_success() -> None:
    assert outcome(job({"type": "Complete"}), []).info == KubernetesExitInfo(0)


def test_deadline_exceeded_is_a_clear_timeout() -> None:
    timed_out = job({"type": "Failed", "reason": "DeadlineExceeded"}, deadline=60)
    info = outcome(timed_out, [pod({"terminated": {"exitCode": 137}})]).info
    assert info.exit_code == TIMEOUT_EXIT_CODE
    assert info.describe() == "exit code 124 (timed out: the Job ran past activeDeadlineSeconds=60)"
    early = job({"type": "FailureTarget", "reason": "DeadlineExceeded"}, deadline=5)
    assert outcome(early, []).info.exit_code == TIMEOUT_EXIT_CODE


def test_image_pull_errors_fail_after_the_grace_period() -> None:
    waiting = {"waiting": {"reason": "ErrImagePull", "message": 'pull "nope:1": not found'}}
    assert outcome(job(), [pod(waiting, age=10)], grace=60) is None
    late = outcome(job(), [pod(waiting, age=61)], grace=60)
    assert late.stop_job and late.info.exit_code == NOT_STARTED_EXIT_CODE
    assert 'cannot start: ErrImagePull: pull "nope:1": not found' in late.info.describe()
    backoff = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}
    assert outcome(job(), [pod(backoff, age=0)], grace=0).info.exit_code == NOT_STARTED_EXIT_CODE


def test_unfixable_waiting_reasons_fail_at_once() -> None:
    for reason in ("InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull"):
        waiting = {"waiting": {"reason": reason, "message": "m"}}
        result = outcome(job(), [pod(waiting, age=0)], grace=600)
        assert result.stop_job and reason in result.info.reason


def test_failed_job_without_exit_code_says_what_is_known() -> None:
    evicted = pod({}, phase="Failed", reason="Evicted", message="node ran low on memory")
    failed = job({"type": "Failed", "reason": "BackoffLimitExceeded", "message": "limit"})
    info = outcome(failed, [evicted]).info
    assert info.exit_code == NO_EXIT_CODE
    assert info.reason == "Job failed: Evicted: node ran low on memory"
    assert outcome(failed, []).info.reason == "Job failed: BackoffLimitExceeded: limit"


def test_newest_pod_decides() -> None:
    old = pod({"terminated": {"exitCode": 1}}, age=100)
    new = pod({"running": {}}, age=1)
    assert outcome(job(), [old, new]) is None


def test_vanished_job() -> None:
    assert vanished(cancelled=True) == KubernetesExitInfo(-15, "cancelled: the Job was deleted")
    assert vanished(cancelled=True).signal == 15
    lost = vanished(cancelled=False)
    assert lost.exit_code == NO_EXIT_CODE and "disappeared" in lost.describe()
