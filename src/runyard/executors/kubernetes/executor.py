"""The Kubernetes executor: one Job per run.

    executor = KubernetesExecutor(settings.kubernetes)
    handle = executor.launch(spec)   # Job created suspended, ConfigMap/Secret owned, resumed
    executor.poll(handle)            # None while pending or running, else KubernetesExitInfo
    executor.cancel(handle, 5.0)     # Job and pod deleted, grace period honoured
    executor.cleanup(handle)         # log copying stopped
    executor.sweep(active_run_ids)   # leftovers of finished or unknown runs deleted

Polls are answered from one watch of this instance's Jobs and one of its pods
(:mod:`.watch`), not from two requests per run; ``on_change`` tells a caller at once that a
run's Job or pod changed. Every object carries this server's ``runyard.dev/instance`` label;
a background sweeper removes this instance's orphans at start and every
``sweep_interval_seconds``. A launch
whose Job already exists (a retried create whose first answer was lost) adopts it when its
run id and instance labels match. A run whose pod has not started within
``start_timeout_seconds`` ends with Kubernetes' reason. Once the caller has the exit, the
Job is deleted by :meth:`cleanup` (``ttlSecondsAfterFinished`` is only a backstop).

``handle.data`` holds only JSON values (namespace, Job name and uid, run id, log path and
offset, and once known the exit), so a handle stored by the caller and rebuilt after a
restart polls and cancels as before; the first poll resumes copying the pod log.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.errors import ConfigError, ExecutorError
from runyard.executors.base import Handle, LaunchSpec
from runyard.executors.kubernetes.api import KubeApi, KubeApiError, api_client_from_settings
from runyard.executors.kubernetes.logs import LogFollower
from runyard.executors.kubernetes.manifests import (
    RESUME_PATCH,
    RunManifests,
    RunOptions,
    build_manifests,
    is_this_runs,
    owned_by,
    split_package_mount,
)
from runyard.executors.kubernetes.names import (
    INSTANCE_LABEL,
    RUN_ID_LABEL,
    managed_selector,
    run_id_of,
)
from runyard.executors.kubernetes.package import PackageFiles, read_package
from runyard.executors.kubernetes.placement import resolve_settings, workspace_instance
from runyard.executors.kubernetes.retry import RetryPolicy
from runyard.executors.kubernetes.status import (
    NO_EXIT_CODE,
    KubernetesExitInfo,
    Outcome,
    job_outcome,
    newest_pod,
    pending_reason,
    pending_since,
    start_timeout,
    vanished,
)
from runyard.executors.kubernetes.sweeper import Sweeper, Swept, sweep_leftovers
from runyard.executors.kubernetes.watch import RunWatch
from runyard.executors.local import open_log
from runyard.kubernetes_settings import KubernetesSettings

if TYPE_CHECKING:
    from runyard.config import Settings

logger = logging.getLogger(__name__)
WAIT_POLL_SECONDS = 1.0  # how often wait_exit polls; a pod has no pidfd
_HANDLE_KEYS = ("namespace", "job_name", "job_uid", "run_id", "log_path", "log_offset")


def _log_size(path: Path) -> int:
    """Create ``path`` (and its folder) if needed; answer its size."""
    try:
        fd = open_log(path)
    except OSError as exc:
        raise ExecutorError(f"Cannot open log file {path}: {exc}") from exc
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _ref(handle: Handle) -> dict[str, Any]:
    missing = [key for key in _HANDLE_KEYS if key not in handle.data]
    if missing:
        raise ExecutorError(
            f"Handle {handle.id} was not launched by the Kubernetes executor "
            f"(missing {', '.join(missing)})"
        )
    return handle.data


class KubernetesExecutor:
    """Run each worker as a Kubernetes Job; see ``docs/kubernetes.md``."""

    name = "kubernetes"

    def __init__(
        self, settings: KubernetesSettings, api_client: Any | None = None, *,
        sweeping: bool = True, watching: bool = True,
    ) -> None:
        self.settings = resolve_settings(settings)  # a ConfigError here stops the start
        client = api_client if api_client is not None else api_client_from_settings(settings)
        retry = RetryPolicy(settings.retry_attempts, settings.retry_base_seconds,
                            settings.retry_max_seconds)
        self._api = KubeApi(client, settings.request_timeout_seconds, retry)
        self._followers: dict[str, LogFollower] = {}
        self._lock = threading.Lock()
        self._sweeper: Sweeper | None = None
        if sweeping:
            self._sweeper = Sweeper(self._api, self.settings)
            self._sweeper.start()
        self._callbacks: list[Callable[[str], None]] = []
        self._watch: RunWatch | None = None
        if watching:
            self._watch = RunWatch(self._api, self.namespace, self.instance,
                                   on_change=self._changed, retry=retry)
            self._watch.start()

    @classmethod
    def from_settings(cls, settings: Settings) -> KubernetesExecutor:
        if settings.kubernetes is None:
            raise ConfigError(
                "The Kubernetes executor needs a 'kubernetes:' settings block "
                "(at least kubernetes.image)"
            )
        k8s = settings.kubernetes
        if k8s.instance is None:
            k8s = k8s.model_copy(update={"instance": workspace_instance(settings.workspace_dir)})
        return cls(k8s)

    @property
    def instance(self) -> str:
        return str(self.settings.instance)

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    @property
    def watch(self) -> RunWatch | None:
        """The watch of this instance's Jobs and pods (None when not watching)."""
        return self._watch

    def launch(self, spec: LaunchSpec, options: RunOptions | None = None) -> Handle:
        """Create the run's Job; with ``options.log_in_pod`` (a task run) the pod appends
        its output to ``spec.log_path`` on the shared volume and no pod log is copied."""
        options = options or RunOptions()
        run_id = run_id_of(spec.labels)
        manifests = build_manifests(spec, self.settings, run_id, self._package(spec), options)
        log_offset = _log_size(spec.log_path)
        job, _ = self._create_job(manifests)
        uid = str(job["metadata"]["uid"])
        try:
            if job["spec"].get("suspend"):
                self._create_dependents(manifests, uid)
                self._api.patch_job(self.namespace, manifests.name, RESUME_PATCH)
        except ExecutorError:
            self._discard_job(self.namespace, manifests.name)
            raise
        data = {
            "namespace": self.namespace, "job_name": manifests.name, "job_uid": uid,
            "run_id": run_id, "log_path": str(spec.log_path), "log_offset": log_offset,
        }
        if options.log_in_pod:
            data["log_in_pod"] = True
        handle = Handle(id=f"{self.namespace}/{manifests.name}", labels=dict(spec.labels),
                        data=data)
        self._follow(handle)
        return handle

    def _package(self, spec: LaunchSpec) -> PackageFiles | None:
        mount, _ = split_package_mount(spec.mounts)
        folder = mount.host_path if mount is not None else self.settings.package_dir
        return None if folder is None else read_package(folder)

    def _create_job(self, manifests: RunManifests) -> tuple[dict[str, Any], bool]:
        """The created Job, or (True) the existing one of the same run and instance: a
        create retried after its answer was lost finds its own Job there."""
        try:
            return self._api.create("Job", self.namespace, manifests.job), False
        except KubeApiError as exc:
            if exc.status != 409:
                raise
        existing = self._api.read_job(self.namespace, manifests.name)
        labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
        ours = {RUN_ID_LABEL: manifests.run_id, INSTANCE_LABEL: self.instance}
        if existing is None or any(labels.get(k) != v for k, v in ours.items()):
            raise ExecutorError(
                f"Job {self.namespace}/{manifests.name} already exists and is not this run's "
                f"(labels {labels} do not match {ours}); delete it or use another namespace"
            )
        if existing["metadata"].get("deletionTimestamp"):
            raise ExecutorError(f"Job {self.namespace}/{manifests.name} is being deleted")
        return existing, True

    def _create_dependents(self, manifests: RunManifests, job_uid: str) -> None:
        for dependent in manifests.dependents:
            owned = owned_by(dependent, manifests.name, job_uid)
            try:
                self._api.create(dependent["kind"], self.namespace, owned)
            except KubeApiError as exc:
                # a create whose answer was lost (retried into 409), or an adopted Job's
                # first launch, may have made it: then it is this run's and counts as made
                if exc.status != 409:
                    raise
                self._check_existing(manifests, owned, job_uid)

    def _check_existing(self, manifests: RunManifests, wanted: dict[str, Any], job_uid: str
                        ) -> None:  # fmt: skip
        """Accept the existing object of ``wanted``'s name when it is owned by this Job, or
        carries this run's labels and the same content; otherwise the launch fails."""
        kind, name = wanted["kind"], wanted["metadata"]["name"]
        selector = managed_selector(manifests.run_id, self.instance)
        found = [item for item in self._api.list(kind, self.namespace, selector)
                 if item["metadata"].get("name") == name]  # fmt: skip
        if found and is_this_runs(found[0], wanted, job_uid):
            return
        raise ExecutorError(
            f"{kind} {self.namespace}/{name} already exists and is not this run's (neither "
            f"owned by Job {manifests.name} nor of its labels and content); delete it or use "
            "another namespace"
        )

    def jobs(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """This instance's Jobs (of run ``run_id``) found by their labels, less those
        being deleted."""
        selector = managed_selector(run_id, self.instance)
        return [job for job in self._api.list("Job", self.namespace, selector)
                if not job["metadata"].get("deletionTimestamp")]  # fmt: skip

    def discard(self, job: dict[str, Any]) -> None:
        """Delete ``job`` (one of :meth:`jobs`); on failure the sweeper or its TTL will."""
        self._discard_job(job["metadata"].get("namespace") or self.namespace,
                          job["metadata"]["name"])  # fmt: skip

    def _follow(self, handle: Handle) -> None:
        ref = _ref(handle)
        if ref.get("log_in_pod"):  # the pod writes the log file itself
            return
        with self._lock:
            if handle.id in self._followers:
                return
            log_path = Path(ref["log_path"])
            copied = max(0, _log_size(log_path) - int(ref["log_offset"]))
            follower = LogFollower(
                self._api, ref["namespace"], ref["run_id"], log_path, copied=copied,
                retry_seconds=self.settings.log_retry_seconds,
                idle_timeout=self.settings.log_idle_timeout_seconds,
            )
            self._followers[handle.id] = follower
        follower.start()

    def poll(self, handle: Handle) -> KubernetesExitInfo | None:
        """The run's end, or None while it runs: from the watch's cache when it is current
        and holds the run's Job, else from the API. A Job is stopped (a pod that cannot or
        did not start) only on what the API says at that moment, never on the cache."""
        known = handle.data.get("exit")
        if known is not None:
            return KubernetesExitInfo(int(known["exit_code"]), str(known["reason"]))
        ref = _ref(handle)
        seen = self._cached(ref)
        if seen is None:
            outcome = self._read_outcome(handle, ref)
        else:
            self._follow(handle)
            outcome = self._outcome(ref, *seen, cached=True)
            if outcome is not None and (outcome.stop_job or outcome.info.exit_code == NO_EXIT_CODE):
                # no exit code: the watch may hold the Job's failure before its pod's end
                # (two streams); the API has both
                outcome = self._read_outcome(handle, ref)
        if outcome is None:
            return None
        if outcome.stop_job:
            self._discard_job(ref["namespace"], ref["job_name"])
        info = outcome.info
        self._drain_log(handle)
        handle.data["exit"] = {"exit_code": info.exit_code, "reason": info.reason}
        return info

    def _cached(self, ref: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The run's Job and pods from the watch, or None when the API must be asked: no
        current watch, a cancelled run (its end is read at once), or a Job the watch does
        not hold (just created, gone, or an older Job of the same name)."""
        watch = self._watch
        if watch is None or ref.get("cancelled") or not watch.synced():
            return None
        job = watch.job(ref["job_name"])
        if job is None or job["metadata"].get("uid") != ref["job_uid"]:
            return None
        return job, watch.pods_of(ref["run_id"])

    def _read_outcome(self, handle: Handle, ref: dict[str, Any]) -> Outcome | None:
        job = self._api.read_job(ref["namespace"], ref["job_name"])
        gone = job is None or job["metadata"].get("uid") != ref["job_uid"]
        if gone or (ref.get("cancelled") and job and job["metadata"].get("deletionTimestamp")):
            # a cancelled Job still being garbage-collected is as good as gone: its pod's
            # exit (143 after SIGTERM) is the cancel's doing, not the run's
            return Outcome(vanished(bool(ref.get("cancelled"))))
        assert job is not None
        self._follow(handle)
        pods = self._api.list("Pod", ref["namespace"], managed_selector(ref["run_id"]))
        return self._outcome(ref, job, pods)

    def _outcome(
        self, ref: dict[str, Any], job: dict[str, Any], pods: list[dict[str, Any]],
        cached: bool = False,
    ) -> Outcome | None:
        """How the run ended, or ended for not starting within ``start_timeout_seconds``
        (``cached``: without reading the events, as the caller asks the API again)."""
        now = datetime.now(UTC)
        outcome = job_outcome(job, pods, now, self.settings.image_pull_grace_seconds)
        if outcome is not None:
            return outcome
        pod = newest_pod(pods)
        since = pending_since(job, pod)
        if since is None:
            ref["started"] = True  # a pod lost later (a node gone) is the Job's to report
        timeout = self.settings.start_timeout_seconds
        if ref.get("started") or since is None or (now - since).total_seconds() < timeout:
            return None
        events = [] if cached else self._events(ref["namespace"], pod or job)
        return start_timeout(pending_reason(job, pod, events), timeout)

    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(run_id)`` whenever a run's Job or pod changes or is deleted, as
        the watch sees it (on its thread: it must be quick; what it raises is logged)."""
        self._callbacks.append(callback)

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        run_id = ((obj.get("metadata") or {}).get("labels") or {}).get(RUN_ID_LABEL)
        if run_id is None:
            return
        for callback in list(self._callbacks):
            try:
                callback(run_id)
            except Exception:
                logger.exception("a change callback failed for run %s", run_id)

    def _events(self, namespace: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """The events about ``obj`` (best effort: reading them may not be allowed)."""
        name = obj["metadata"]["name"]
        try:
            return self._api.list("Event", namespace, field_selector=f"involvedObject.name={name}")
        except ExecutorError as exc:
            logger.info("cannot read the events of %s: %s", name, exc)
            return []

    def wait_exit(self, handle: Handle, timeout: float | None = None) -> KubernetesExitInfo | None:
        """The exit of ``handle`` within ``timeout`` seconds, else None: a pod has no pidfd,
        so it is polled every :data:`WAIT_POLL_SECONDS`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (info := self.poll(handle)) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(WAIT_POLL_SECONDS if left is None else min(WAIT_POLL_SECONDS, left))
        return info

    def _discard_job(self, namespace: str, name: str) -> None:
        """Delete a Job that must not run; on failure the sweeper removes it later."""
        try:
            self._api.delete("Job", namespace, name, propagation="Background")
        except ExecutorError as exc:
            logger.warning("could not delete Job %s/%s: %s", namespace, name, exc)

    def _drain_log(self, handle: Handle) -> None:
        with self._lock:
            follower = self._followers.get(handle.id)
        if follower is not None:
            follower.finish(self.settings.log_drain_seconds)

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None:
        """Delete the Job (with the configured propagation) and its pod.

        The grace period of a Job's deletion does not reach its pods, so the pod is also
        deleted directly with ``gracePeriodSeconds`` = ``grace_seconds``.
        """
        ref = _ref(handle)
        grace = max(0, math.ceil(grace_seconds))
        handle.data["cancelled"] = True
        self._api.delete("Job", ref["namespace"], ref["job_name"],
                         propagation=self.settings.propagation_policy, grace_seconds=grace)
        for pod in self._api.list("Pod", ref["namespace"], managed_selector(ref["run_id"])):
            self._api.delete("Pod", ref["namespace"], pod["metadata"]["name"],
                             grace_seconds=grace)

    def cleanup(self, handle: Handle) -> None:
        """Stop copying the pod log (after draining it when the run has ended); once the
        run's end is known, delete its Job (and so its pod and what it owns)."""
        with self._lock:
            follower = self._followers.pop(handle.id, None)
        if follower is not None:
            if "exit" in handle.data:
                follower.finish(self.settings.log_drain_seconds)
            follower.stop()
        ref = handle.data
        if "exit" in ref and not ref.get("deleted") and "job_name" in ref:
            self._discard_job(ref["namespace"], ref["job_name"])
            ref["deleted"] = True

    def sweep(self, active_run_ids: Collection[str], min_age_seconds: float = 300.0) -> list[Swept]:
        """Delete leftovers of runs not in ``active_run_ids`` (see :mod:`.sweeper`)."""
        return sweep_leftovers(
            self._api, self.namespace, self.instance, active_run_ids,
            min_age_seconds=min_age_seconds,
        )

    def close(self) -> None:
        """Stop the sweeper, the watch, every log follower, and close the API client."""
        if self._sweeper is not None:
            self._sweeper.stop()
        if self._watch is not None:
            self._watch.close()
        with self._lock:
            followers = list(self._followers.values())
            self._followers.clear()
        for follower in followers:
            follower.stop()
        self._api.close()
