"""How a Job and its pod translate into an ExitInfo (pure functions over API dicts).

| what Kubernetes says                                   | exit code | reason              |
|--------------------------------------------------------|-----------|---------------------|
| container terminated                                   | its code  | e.g. ``OOMKilled``  |
| Job condition ``Complete``                             | 0         |                     |
| Job failed with ``DeadlineExceeded``                   | 124       | timed out           |
| image cannot be pulled / container cannot be created   | 125       | the kubelet's words |
| not running within ``start_timeout_seconds``           | 125       | why, as reported    |
| Job failed, or gone, without a container exit code     | 255       | what is known       |
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runyard.executors.base import ExitInfo
from runyard.executors.kubernetes.names import CONTAINER_NAME

TIMEOUT_EXIT_CODE = 124
NOT_STARTED_EXIT_CODE = 125
NO_EXIT_CODE = 255
FATAL_WAITING = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"}
)
PULL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff"})
_PLAIN_REASONS = frozenset({"Completed", "Error", ""})


@dataclass(frozen=True)
class KubernetesExitInfo(ExitInfo):
    """An ExitInfo that also says why, in Kubernetes' terms (``describe()`` includes it)."""

    reason: str = ""

    def describe(self) -> str:
        base = super().describe()
        return f"{base} ({self.reason})" if self.reason else base


@dataclass(frozen=True)
class Outcome:
    """The run's end, and whether the Job must still be stopped (it cannot start)."""

    info: KubernetesExitInfo
    stop_job: bool = False


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _condition(job: dict[str, Any], *types: str) -> dict[str, Any] | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in types and condition.get("status") == "True":
            return condition
    return None


def newest_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)


def container_state(pod: dict[str, Any] | None) -> dict[str, Any]:
    """The worker container's ``state`` (``{"waiting": …}`` / ``running`` / ``terminated``)."""
    if pod is None:
        return {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER_NAME:
            return status.get("state") or {}
    return {}


def _terminated(pod: dict[str, Any] | None) -> KubernetesExitInfo | None:
    done = container_state(pod).get("terminated")
    if done is None:
        return None
    reason = done.get("reason") or ""
    detail = "" if reason in _PLAIN_REASONS else reason
    if detail and done.get("message"):
        detail = f"{detail}: {done['message']}"
    return KubernetesExitInfo(int(done.get("exitCode", NO_EXIT_CODE)), detail)


def _not_started(pod: dict[str, Any] | None, now: datetime, pull_grace: float) -> Outcome | None:
    waiting = container_state(pod).get("waiting")
    if pod is None or waiting is None:
        return None
    reason = waiting.get("reason") or ""
    created = parse_time(pod["metadata"].get("creationTimestamp"))
    age = (now - created).total_seconds() if created else 0.0
    if reason in FATAL_WAITING or (reason in PULL_WAITING and age >= pull_grace):
        message = waiting.get("message") or "no message"
        info = KubernetesExitInfo(NOT_STARTED_EXIT_CODE, f"cannot start: {reason}: {message}")
        return Outcome(info, stop_job=True)
    return None


def _failed(job: dict[str, Any], pod: dict[str, Any] | None) -> KubernetesExitInfo | None:
    failed = _condition(job, "Failed", "FailureTarget")
    if failed is None:
        return None
    if failed.get("reason") == "DeadlineExceeded":
        deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
        return KubernetesExitInfo(
            TIMEOUT_EXIT_CODE, f"timed out: the Job ran past activeDeadlineSeconds={deadline}"
        )
    pod_status = (pod or {}).get("status") or {}
    detail = pod_status.get("reason") or failed.get("reason") or "Failed"
    message = pod_status.get("message") or failed.get("message") or ""
    return _terminated(pod) or KubernetesExitInfo(
        NO_EXIT_CODE, f"Job failed: {detail}" + (f": {message}" if message else "")
    )


def job_outcome(
    job: dict[str, Any], pods: list[dict[str, Any]], now: datetime, pull_grace: float
) -> Outcome | None:
    """The end of the run ``job`` describes, or None while it is pending or running."""
    pod = newest_pod(pods)
    failed = _failed(job, pod)
    if failed is not None:
        return Outcome(failed)
    terminated = _terminated(pod)
    if terminated is not None:
        return Outcome(terminated)
    if _condition(job, "Complete", "SuccessCriteriaMet") is not None:
        return Outcome(KubernetesExitInfo(0))
    return _not_started(pod, now, pull_grace)


def vanished(cancelled: bool) -> KubernetesExitInfo:
    """The end of a run whose Job is gone before its end was seen."""
    if cancelled:
        return KubernetesExitInfo(-signal.SIGTERM, "cancelled: the Job was deleted")
    return KubernetesExitInfo(
        NO_EXIT_CODE, "the Job disappeared before its end was seen (deleted, or expired by TTL)"
    )


def started(pod: dict[str, Any] | None) -> bool:
    """Whether the worker container has run (running now, or already terminated)."""
    state = container_state(pod)
    return "running" in state or "terminated" in state


def pending_since(job: dict[str, Any], pod: dict[str, Any] | None) -> datetime | None:
    """Since when the run waits to start (None once its container has run): the pod's
    creation, else (no pod yet) the Job's start or creation."""
    if started(pod):
        return None
    if pod is not None:
        return parse_time(pod["metadata"].get("creationTimestamp"))
    status = job.get("status") or {}
    return parse_time(status.get("startTime") or job["metadata"].get("creationTimestamp"))


def _scheduling(pod: dict[str, Any] | None) -> str:
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return _reason_text(condition)
    return ""


def _reason_text(item: dict[str, Any]) -> str:
    reason, message = item.get("reason") or "", item.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message


def pending_reason(
    job: dict[str, Any], pod: dict[str, Any] | None, events: list[dict[str, Any]]
) -> str:
    """Why the run has not started, in Kubernetes' words: the pod's scheduling condition,
    its container's waiting state, a Job condition, else the newest warning event."""
    waiting = container_state(pod).get("waiting") or {}
    if waiting.get("reason") in (FATAL_WAITING | PULL_WAITING):
        return _reason_text(waiting)
    for text in (_scheduling(pod), _job_condition_text(job)):
        if text:
            return text
    warnings = [e for e in events if e.get("type") == "Warning"]
    newest = max(warnings, key=lambda e: e.get("lastTimestamp") or "", default=None)
    if newest is not None:
        return _reason_text(newest)
    if waiting:
        return _reason_text(waiting)
    return "the Job has no pod" if pod is None else "the pod is still pending"


def _job_condition_text(job: dict[str, Any]) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") != "Suspended":
            return _reason_text(condition)
    return ""


def start_timeout(reason: str, timeout: float) -> Outcome:
    """The end of a run whose pod did not start in time: the Job must be stopped."""
    info = KubernetesExitInfo(
        NOT_STARTED_EXIT_CODE, f"not started within {timeout:g} s: {reason}"
    )
    return Outcome(info, stop_job=True)
