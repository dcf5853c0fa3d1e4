"""What a real cluster does to the Kubernetes executor, played by the fake API server through
the real ``kubernetes`` client: pods that never start, transient API failures, a lost create
answer, a slow garbage collector, OOM kills, other servers' objects, hostPath placement."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from k8s_fake_api import FakeKubernetes
from kubernetes.client import ApiClient, Configuration

from runyard.config import Settings
from runyard.errors import ConfigError, ExecutorError
from runyard.executors.base import Handle, LaunchSpec, Limits, Mount
from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings
from runyard.executors.kubernetes.api import KubeApi, KubeApiError
from runyard.executors.kubernetes.names import INSTANCE_LABEL, RUN_ID_LABEL
from runyard.executors.kubernetes.retry import RetryPolicy

JOB = "runyard-run-1"
MANAGED = "app.kubernetes.io/managed-by"


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


def k8s_settings(**overrides: Any) -> KubernetesSettings:
    values: dict[str, Any] = {
        "image": "registry.example/agent:1", "log_retry_seconds": 0.05,
        "request_timeout_seconds": 5, "log_drain_seconds": 1, "node_name": "node-a",
        "instance": "ry-me", "retry_base_seconds": 0.01, "retry_max_seconds": 5,
    }
    return KubernetesSettings(**{**values, **overrides})


@pytest.fixture
def make_executor(fake: FakeKubernetes) -> Iterator[Callable[..., KubernetesExecutor]]:
    made: list[KubernetesExecutor] = []

    def make(sweeping: bool = False, watching: bool = False, **overrides: Any) -> KubernetesExecutor:
        # without the watch, each poll reads what the test has just changed
        executor = KubernetesExecutor(k8s_settings(**overrides), ApiClient(Configuration(
            host=fake.url)), sweeping=sweeping, watching=watching)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.close()


@pytest.fixture
def run_spec(tmp_path: Path) -> LaunchSpec:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return LaunchSpec(
        argv=["python", "-m", "agent"], log_path=tmp_path / "logs" / "run-1.log",
        env={"RUNYARD_TOKEN": "t0k"}, mounts=[Mount(workspace, "/workspace")],
        labels={RUN_ID_LABEL: "run-1"}, limits=Limits(timeout_seconds=600), network=False,
    )


def jobs(fake: FakeKubernetes) -> list[dict[str, Any]]:
    return [o for (kind, _, _), o in fake.objects.items() if kind == "Job"]


# --- 1. start timeout ---------------------------------------------------------------------
def test_an_unschedulable_pod_fails_at_the_start_timeout_with_the_scheduler_reason(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(start_timeout_seconds=60)
    handle = executor.launch(run_spec)
    why = "0/3 nodes are available: 3 Insufficient memory."
    fake.set_unschedulable(JOB, why, age_seconds=30)
    assert executor.poll(handle) is None  # may still be scheduled
    fake.set_unschedulable(JOB, why, age_seconds=61)
    info = executor.poll(handle)
    assert info is not None and info.exit_code == 125
    assert info.reason == f"not started within 60 s: Unschedulable: {why}"
    assert jobs(fake) == []  # the Job that cannot start is stopped


def test_a_started_pod_lost_later_is_not_a_start_timeout(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(start_timeout_seconds=60)
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    assert executor.poll(handle) is None
    with fake.cond:  # its node is gone: the pod with it, the Job not yet marked failed
        del fake.objects[("Pod", "default", fake.pod_of(JOB)["metadata"]["name"])]
    fake.age_job(JOB, 3600)
    assert executor.poll(handle) is None  # the job controller will say how it ended
    with fake.cond:
        failed = {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                  "message": "the pod was deleted"}
        fake.objects[("Job", "default", JOB)]["status"] = {"failed": 1, "conditions": [failed]}
    info = executor.poll(handle)
    assert info is not None and info.exit_code == 255 and "PodFailurePolicy" in info.reason


def test_image_pull_back_off_fails_at_the_start_timeout_even_with_a_long_pull_grace(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(start_timeout_seconds=60, image_pull_grace_seconds=3600)
    handle = executor.launch(run_spec)
    fake.set_waiting(JOB, "ImagePullBackOff", "Back-off pulling image", age_seconds=61)
    info = executor.poll(handle)
    assert info is not None and info.exit_code == 125
    assert "ImagePullBackOff: Back-off pulling image" in info.reason


def test_a_pod_never_created_reports_the_jobs_warning_event(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(start_timeout_seconds=60)
    handle = executor.launch(run_spec)
    with fake.cond:  # the quota admission refused the pod: the Job has none
        del fake.objects[("Pod", "default", fake.pod_of(JOB)["metadata"]["name"])]
    fake.age_job(JOB, 61)
    fake.add_event(JOB, "FailedCreate", 'pods "x" is forbidden: exceeded quota: compute')
    info = executor.poll(handle)
    assert info is not None and info.exit_code == 125
    assert info.reason.endswith("FailedCreate: pods \"x\" is forbidden: exceeded quota: compute")
    events = fake.requests_of("GET", "/events")[0]
    assert events.query["fieldSelector"] == f"involvedObject.name={JOB}"


# --- 2. retries and idempotent launch -----------------------------------------------------
def test_transient_failures_are_retried_and_a_lasting_one_is_reported(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(retry_attempts=3)
    fake.inject("POST", "/jobs", 429, retry_after="0")
    fake.inject("PATCH", f"/jobs/{JOB}", 503)
    handle = executor.launch(run_spec)
    assert fake.job(JOB)["spec"]["suspend"] is False
    fake.inject("GET", f"/jobs/{JOB}", 503, times=2)
    assert executor.poll(handle) is None
    fake.inject("GET", f"/jobs/{JOB}", 500, times=10)
    with pytest.raises(KubeApiError) as caught:
        executor.poll(handle)
    assert caught.value.status == 500
    assert len(fake.requests_of("GET", f"/jobs/{JOB}")) == 3 + 4  # 2 retried, then 1 + 3
    fake.injected.clear()
    fake.inject("GET", f"/jobs/{JOB}", 403)  # not transient: reported at once
    with pytest.raises(KubeApiError, match="HTTP 403"):
        executor.poll(handle)
    assert len(fake.requests_of("GET", f"/jobs/{JOB}")) == 3 + 4 + 1


def test_retry_after_is_honoured_and_connection_errors_are_retried(fake: FakeKubernetes) -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=2, base_seconds=0.01, max_seconds=10, sleep=waits.append)
    api = KubeApi(ApiClient(Configuration(host=fake.url)), 5, policy)
    # (urllib3 itself already waits out a 429/503 Retry-After; a 500 reaches this layer)
    fake.inject("GET", "/jobs/x", 500, retry_after="2")
    assert api.read_job("default", "x") is None  # then 404: gone
    assert waits == [2.0]
    api.close()
    waits.clear()
    dead = KubeApi(ApiClient(Configuration(host="http://127.0.0.1:9")), 1, policy)
    with pytest.raises(ExecutorError, match="API server"):
        dead.read_job("default", "x")
    assert len(waits) == 2 and all(0 <= w <= 0.02 for w in waits)
    dead.close()


def test_a_lost_create_answer_adopts_the_job_instead_of_leaving_it_suspended(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor()
    fake.inject("POST", "/jobs", 503, apply=True)  # created, but the answer is lost
    handle = executor.launch(run_spec)
    assert [r.path for r in fake.requests_of("POST", "/jobs")] == [
        "/apis/batch/v1/namespaces/default/jobs"] * 2  # the retry met 409 AlreadyExists
    assert len(jobs(fake)) == 1 and fake.job(JOB)["spec"]["suspend"] is False
    assert handle.data["job_uid"] == fake.job(JOB)["metadata"]["uid"]
    assert {"Secret", "NetworkPolicy"} <= fake.kinds_named(JOB)


def test_an_existing_job_of_another_run_or_instance_is_not_adopted(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor()
    labels = {MANAGED: "runyard", RUN_ID_LABEL: "run-1", INSTANCE_LABEL: "ry-other"}
    body = {"metadata": {"name": JOB, "labels": labels},
            "spec": {"suspend": True, "template": {"spec": {"containers": []}}}}
    fake.add("Job", body, datetime.now(UTC))
    with pytest.raises(ExecutorError, match="already exists and is not this run's"):
        executor.launch(run_spec)
    assert fake.requests_of("DELETE", "/jobs") == [] and fake.job(JOB)["spec"]["suspend"]


# --- 3. the outcome before the Job goes -----------------------------------------------------
def test_an_oom_kill_is_recorded_then_the_job_is_deleted(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor()
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    fake.terminate(JOB, 137, reason="OOMKilled")
    info = executor.poll(handle)
    assert info is not None and info.exit_code == 137 and info.reason == "OOMKilled"
    assert fake.requests_of("DELETE", "/jobs") == []  # not before the caller has it
    executor.cleanup(handle)
    assert fake.requests_of("DELETE", f"/jobs/{JOB}")[0].query["propagationPolicy"] == "Background"
    assert jobs(fake) == []
    assert KubernetesSettings(image="a").ttl_seconds_after_finished == 86400


# --- 4. cancel ---------------------------------------------------------------------------
def test_cancel_reads_minus_15_while_the_job_is_still_being_collected(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    fake.gc_delay = 30.0  # the garbage collector is slow: the Job lingers
    executor = make_executor()
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    executor.cancel(handle, grace_seconds=1)
    assert fake.job(JOB)["metadata"]["deletionTimestamp"]
    delete = fake.requests_of("DELETE", f"/jobs/{JOB}")[0]
    assert delete.query == {"propagationPolicy": "Foreground", "gracePeriodSeconds": "1"}
    stored = json.loads(json.dumps(handle.data))  # a restarted server reads the same
    info = executor.poll(Handle(id=handle.id, labels=handle.labels, data=stored))
    assert info is not None and info.exit_code == -15
    assert info.reason == "cancelled: the Job was deleted"


# --- 5./6. see test_kubernetes_manifests.py and test_kubernetes_validate.py -------------------
# --- 7. sweeper --------------------------------------------------------------------------------
def _add(fake: FakeKubernetes, kind: str, name: str, instance: str, **extra: Any) -> None:
    labels = {MANAGED: "runyard", RUN_ID_LABEL: name, INSTANCE_LABEL: instance}
    body: dict[str, Any] = {"metadata": {"name": name, "labels": labels, **extra}}
    if kind == "Job":
        body["spec"] = {"suspend": extra.pop("suspend", True),
                        "template": {"spec": {"containers": []}}}
        body["metadata"].pop("suspend", None)
    fake.add(kind, body, datetime.now(UTC) - timedelta(hours=1))


def test_the_sweeper_runs_at_start_and_removes_only_this_instances_orphans(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    _add(fake, "Job", "runyard-half-launched", "ry-me")  # suspended: its launch died
    _add(fake, "Job", "runyard-running", "ry-me", suspend=False)
    running_uid = fake.job("runyard-running")["metadata"]["uid"]
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "x", "uid": running_uid}]
    _add(fake, "Secret", "runyard-running", "ry-me", ownerReferences=owner)
    _add(fake, "ConfigMap", "runyard-orphan", "ry-me")  # its Job is gone
    _add(fake, "Job", "runyard-theirs", "ry-other")
    _add(fake, "ConfigMap", "runyard-theirs", "ry-other")
    executor = make_executor(sweeping=True, sweep_interval_seconds=3600)
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    swept = {("Job", "default", "runyard-half-launched"), ("ConfigMap", "default", "runyard-orphan")}
    while swept & set(fake.objects):
        assert datetime.now(UTC) < deadline, "the sweeper did not run at start"
        time.sleep(0.02)
    remaining = {(kind, name) for kind, _, name in fake.objects}
    assert remaining == {("Job", "runyard-running"), ("Secret", "runyard-running"),
                         ("Job", "runyard-theirs"), ("ConfigMap", "runyard-theirs")}
    assert all("runyard.dev/instance=ry-me" in r.query["labelSelector"]
               for r in fake.requests if r.method == "GET")
    executor.close()


def test_from_settings_records_one_instance_per_workspace(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "c", "cluster": {"server": fake.url}}],
        "users": [{"name": "u", "user": {"token": "k"}}],
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}]}))
    k8s = {"image": "a:1", "node_name": "n1", "kubeconfig": str(kubeconfig)}
    found = []
    for workspace in ("one", "one", "two"):
        settings = Settings(kubernetes=k8s, workspace_dir=tmp_path / workspace)
        executor = KubernetesExecutor.from_settings(settings)
        found.append(executor.instance)
        executor.close()
    assert found[0] == found[1] != found[2] and found[0].startswith("ry-")


# --- 8. hostPath placement ---------------------------------------------------------------
def test_host_path_pods_are_pinned_to_runyards_node_or_the_start_is_refused(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor],
    run_spec: LaunchSpec, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(ConfigError, match="node_name"):
        make_executor(node_name=None)
    monkeypatch.setenv("NODE_NAME", "node-from-downward-api")
    make_executor(node_name=None).launch(run_spec)
    affinity = fake.job(JOB)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term == {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-from-downward-api"]}]}
    monkeypatch.delenv("NODE_NAME")
    chosen = make_executor(node_name=None, node_selector={"runyard/host": "yes"})
    assert chosen.settings.node_name is None
    pvc = make_executor(node_name=None, volume_mode="pvc", pvc_name="d", pvc_host_root="/srv")
    assert pvc.settings.node_name is None  # a claim is reachable from any node
