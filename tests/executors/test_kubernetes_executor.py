"""The Kubernetes executor end to end: the real ``kubernetes`` client against a fake API
server on 127.0.0.1 (tests/executors/k8s_fake_api.py). No real cluster is involved."""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from k8s_cluster import wait_for
from k8s_fake_api import FakeKubernetes
from kubernetes.client import ApiClient, Configuration

from runyard.config import Settings
from runyard.errors import ExecutorError
from runyard.executors.base import Handle, LaunchSpec, Limits, Mount
from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings
from runyard.executors.kubernetes.api import KubeApi
from runyard.executors.kubernetes.logs import LogFollower
from runyard.executors.kubernetes.manifests import build_manifests
from runyard.executors.kubernetes.names import RUN_ID_LABEL
from runyard.executors.kubernetes.package import read_package

JOB = "runyard-run-1"
TOKEN = "tok-7d1e-very-secret"


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


def k8s_settings(**overrides: Any) -> KubernetesSettings:
    values: dict[str, Any] = {"image": "registry.example/agent:1", "log_retry_seconds": 0.05,
                              "request_timeout_seconds": 5, "log_drain_seconds": 5,
                              "node_name": "node-a", "instance": "ry-test"}
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
def executor(make_executor: Callable[..., KubernetesExecutor]) -> KubernetesExecutor:
    return make_executor()


@pytest.fixture
def run_spec(tmp_path: Path) -> LaunchSpec:
    workspace = tmp_path / "ws" / "run-1"
    (workspace / "in").mkdir(parents=True)
    package = tmp_path / "package"
    package.mkdir()
    (package / "main.py").write_text("print('hello')\n")
    return LaunchSpec(
        argv=["python", "/opt/agent/package/main.py"],
        log_path=tmp_path / "logs" / "run-1.log",
        env={"RUNYARD_TOKEN": TOKEN, "MODE": "test"},
        stdin=b'{"prompt": "hi"}',
        mounts=[Mount(workspace, "/workspace"), Mount(workspace / "in", "/workspace/in", True),
                Mount(package, "/opt/agent/package", True)],
        labels={RUN_ID_LABEL: "run-1", "session": "s-1"},
        limits=Limits(timeout_seconds=30),
        network=False,
    )


def poll_until_done(executor: KubernetesExecutor, handle: Handle) -> Any:
    return wait_for(lambda: executor.poll(handle))


def test_launch_creates_suspended_job_then_owned_objects_then_resumes(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    writes = [(r.method, r.path.rsplit("/", 2)[-2 if r.method == "PATCH" else -1])
              for r in fake.requests if r.method in ("POST", "PATCH")]
    assert writes == [("POST", "jobs"), ("POST", "configmaps"), ("POST", "secrets"),
                      ("POST", "networkpolicies"), ("PATCH", "jobs")]
    created_job = fake.requests_of("POST", "/jobs")[0].body
    assert created_job["spec"]["suspend"] is True
    package = read_package(run_spec.mounts[2].host_path)
    assert created_job == build_manifests(run_spec, executor.settings, "run-1", package).job
    uid = fake.job(JOB)["metadata"]["uid"]
    for kind in ("configmaps", "secrets", "networkpolicies"):
        body = fake.requests_of("POST", f"/{kind}")[0].body
        assert body["metadata"]["ownerReferences"] == [
            {"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": uid}]
    assert fake.requests_of("PATCH", f"/jobs/{JOB}")[0].body == {"spec": {"suspend": False}}
    assert fake.job(JOB)["spec"]["suspend"] is False
    assert TOKEN not in json.dumps(created_job)
    secret = fake.requests_of("POST", "/secrets")[0].body
    assert base64.b64decode(secret["data"]["env.RUNYARD_TOKEN"]).decode() == TOKEN
    assert base64.b64decode(secret["data"]["stdin"]) == b'{"prompt": "hi"}'
    assert handle.id == f"default/{JOB}" and handle.data["run_id"] == "run-1"
    assert json.loads(json.dumps(handle.data)) == handle.data


def test_poll_follows_the_pod_and_copies_its_log(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    assert executor.poll(handle) is None  # pending: container still being created
    fake.start_container(JOB)
    fake.write_log(JOB, b"step 1\n")
    assert executor.poll(handle) is None
    wait_for(lambda: run_spec.log_path.read_bytes() == b"step 1\n")
    fake.write_log(JOB, b"step 2\npartial")
    fake.terminate(JOB, 3)
    info = poll_until_done(executor, handle)
    assert info.exit_code == 3 and info.describe() == "exit code 3"
    assert run_spec.log_path.read_bytes() == b"step 1\nstep 2\npartial"
    assert executor.poll(handle) == info and handle.data["exit"]["exit_code"] == 3
    executor.cleanup(handle)
    fake.stop()  # the answer is remembered: no API call needed any more
    assert executor.poll(handle) == info


def test_a_run_that_ends_while_its_pod_is_being_read_keeps_its_log(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec, tmp_path: Path
) -> None:
    # the log follower reads the pod while its container is still being created; before it
    # acts on what it read, the container starts, logs and exits, and the run's end is
    # known (finish): what it logged is still copied, not taken for a run that never started
    handle = executor.launch(run_spec)
    read, go = threading.Event(), threading.Event()

    class SlowReader(KubeApi):
        def list(
            self, kind: str, namespace: str, label_selector: str = "", field_selector: str = ""
        ) -> list[dict[str, Any]]:
            items = super().list(kind, namespace, label_selector, field_selector)
            if kind == "Pod" and not read.is_set():
                read.set()
                go.wait(10)
            return items

    api = SlowReader(ApiClient(Configuration(host=fake.url)), timeout=5)
    log_path = tmp_path / "follower.log"
    follower = LogFollower(api, handle.data["namespace"], "run-1", log_path, retry_seconds=0.05)
    follower.start()
    assert read.wait(10)
    fake.start_container(JOB)
    fake.write_log(JOB, b"all of it\n")
    fake.terminate(JOB, 0)
    finished: list[bool] = []
    closing = threading.Thread(target=lambda: finished.append(follower.finish(10)))
    closing.start()
    time.sleep(0.2)  # finish() has said the run is over
    go.set()
    closing.join(15)
    assert finished == [True]
    assert log_path.read_bytes() == b"all of it\n"


def test_log_stream_break_resumes_without_duplicates(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    fake.break_next_stream_after = 9
    fake.write_log(JOB, b"line one\nline two\n")
    wait_for(lambda: run_spec.log_path.read_bytes() == b"line one\nline two\n")
    fake.write_log(JOB, b"line three\n")
    fake.terminate(JOB, 0)
    assert poll_until_done(executor, handle).exit_code == 0
    assert run_spec.log_path.read_bytes() == b"line one\nline two\nline three\n"
    assert fake.log_requests >= 2


def test_log_appends_after_earlier_content_and_survives_adoption(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    run_spec.log_path.parent.mkdir(parents=True)
    run_spec.log_path.write_bytes(b"queued by runyard\n")
    first = make_executor()
    handle = first.launch(run_spec)
    fake.start_container(JOB)
    fake.write_log(JOB, b"a\n")
    wait_for(lambda: run_spec.log_path.read_bytes().endswith(b"a\n"))
    first.close()  # the server goes away; the pod keeps running
    fake.write_log(JOB, b"b\n")
    stored = json.loads(json.dumps({"id": handle.id, "labels": handle.labels,
                                    "data": handle.data}))
    adopted = Handle(id=stored["id"], labels=stored["labels"], data=stored["data"])
    second = make_executor()
    assert second.poll(adopted) is None
    wait_for(lambda: run_spec.log_path.read_bytes().endswith(b"b\n"))
    fake.terminate(JOB, 0)
    assert poll_until_done(second, adopted).exit_code == 0
    assert run_spec.log_path.read_bytes() == b"queued by runyard\na\nb\n"


def test_deadline_exceeded_is_reported_as_timeout(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    fake.fail_job(JOB, "DeadlineExceeded", "Job was active longer than specified deadline")
    info = poll_until_done(executor, handle)
    assert info.exit_code == 124
    assert "timed out: the Job ran past activeDeadlineSeconds=30" in info.describe()


def test_image_pull_failure_fails_the_run_and_stops_the_job(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(image_pull_grace_seconds=30)
    handle = executor.launch(run_spec)
    fake.set_waiting(JOB, "ErrImagePull", "manifest unknown", age_seconds=5)
    assert executor.poll(handle) is None  # may still recover
    fake.set_waiting(JOB, "ImagePullBackOff", "manifest unknown", age_seconds=31)
    info = executor.poll(handle)
    assert info.exit_code == 125
    assert info.reason == "cannot start: ImagePullBackOff: manifest unknown"
    deletion = fake.requests_of("DELETE", f"/jobs/{JOB}")[-1]
    assert deletion.query["propagationPolicy"] == "Background"
    assert "Job" not in fake.kinds_named(JOB)


def test_cancel_deletes_job_with_propagation_and_pod_with_grace(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    pod_name = fake.pod_of(JOB)["metadata"]["name"]
    executor.cancel(handle, grace_seconds=2.5)
    job_delete = fake.requests_of("DELETE", f"/jobs/{JOB}")[0]
    assert job_delete.query == {"propagationPolicy": "Foreground", "gracePeriodSeconds": "3"}
    assert fake.kinds_named(JOB) == set()  # the fake's garbage collector removed the rest
    info = executor.poll(handle)
    assert info.exit_code == -15 and info.reason == "cancelled: the Job was deleted"
    executor.cleanup(handle)
    assert all(r.query.get("gracePeriodSeconds") == "3"
               for r in fake.requests_of("DELETE", f"/pods/{pod_name}"))


def test_cancel_deletes_a_still_present_pod_with_the_grace_period(
    fake: FakeKubernetes, make_executor: Callable[..., KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    executor = make_executor(propagation_policy="Background")
    handle = executor.launch(run_spec)
    pod_name = fake.pod_of(JOB)["metadata"]["name"]
    fake.objects[("Pod", "default", pod_name)]["metadata"]["ownerReferences"] = []
    executor.cancel(handle, grace_seconds=0)
    assert fake.requests_of("DELETE", f"/jobs/{JOB}")[0].query["propagationPolicy"] == "Background"
    pod_delete = fake.requests_of("DELETE", f"/pods/{pod_name}")[0]
    assert pod_delete.query == {"gracePeriodSeconds": "0"}


def test_a_failed_launch_removes_its_job(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    fake.add("Secret", {"metadata": {"name": JOB}}, created=fake_now())
    with pytest.raises(ExecutorError, match="already exists"):
        executor.launch(run_spec)
    assert fake.requests_of("DELETE", f"/jobs/{JOB}")[0].query["propagationPolicy"] == "Background"
    assert "Job" not in fake.kinds_named(JOB) and "ConfigMap" not in fake.kinds_named(JOB)


def test_poll_of_a_job_gone_without_cancel_says_so(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    with fake.cond:
        fake._delete("Job", "default", fake.objects[("Job", "default", JOB)])
    info = executor.poll(handle)
    assert info.exit_code == 255 and "disappeared" in info.reason
    with pytest.raises(ExecutorError, match="not launched by the Kubernetes executor"):
        executor.poll(Handle(id="local-1", pid=1))


def fake_now() -> datetime:
    return datetime.now(UTC)


def test_sweeper_deletes_leftovers_of_finished_or_unknown_runs(
    fake: FakeKubernetes, executor: KubernetesExecutor
) -> None:
    old, young = fake_now() - timedelta(hours=1), fake_now() - timedelta(seconds=10)
    managed = {"app.kubernetes.io/managed-by": "runyard", "runyard.dev/instance": "ry-test"}

    def add(kind: str, name: str, run_id: str | None, created: Any, labels: Any = managed) -> None:
        extra = {} if run_id is None else {RUN_ID_LABEL: run_id}
        body = {"metadata": {"name": name, "labels": {**labels, **extra}}}
        if kind == "Job":
            body["spec"] = {"suspend": True, "template": {"spec": {"containers": []}}}
        fake.add(kind, body, created)

    for kind in ("Job", "ConfigMap", "Secret", "NetworkPolicy"):
        add(kind, "runyard-done", "run-done", old)
    add("Secret", "runyard-orphan", None, old)
    add("Job", "runyard-live", "run-live", old)
    add("ConfigMap", "runyard-live", "run-live", old)
    add("ConfigMap", "runyard-new", "run-new", young)
    add("ConfigMap", "someone-elses", "run-done", old, labels={"app": "other"})
    add("ConfigMap", "other-server", "run-done", old,
        labels={**managed, "runyard.dev/instance": "ry-other"})
    swept = executor.sweep(active_run_ids={"run-live"}, min_age_seconds=300)
    assert sorted((s.kind, s.name) for s in swept) == [
        ("ConfigMap", "runyard-done"), ("Job", "runyard-done"), ("NetworkPolicy", "runyard-done"),
        ("Secret", "runyard-done"), ("Secret", "runyard-orphan")]
    remaining = {(kind, name) for kind, _, name in fake.objects}
    assert remaining == {("Job", "runyard-live"), ("ConfigMap", "runyard-live"),
                         ("ConfigMap", "runyard-new"), ("ConfigMap", "someone-elses"),
                         ("ConfigMap", "other-server")}
    job_delete = fake.requests_of("DELETE", "/jobs/runyard-done")[0]
    assert job_delete.query == {"propagationPolicy": "Background"}
    selector = fake.requests_of("GET", "/secrets")[0].query["labelSelector"]
    assert selector == "app.kubernetes.io/managed-by=runyard,runyard.dev/instance=ry-test"


def test_from_settings_reads_a_kubeconfig(fake: FakeKubernetes, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
        "users": [{"name": "me", "user": {"token": "kube-token"}}],
        "contexts": [{"name": "test", "context": {"cluster": "fake", "user": "me",
                                                  "namespace": "ignored"}}],
    }))
    settings = Settings(kubernetes={"image": "a:1", "namespace": "agents", "node_name": "n1",
                                    "kubeconfig": str(kubeconfig)}, workspace_dir=tmp_path / "ws")
    executor = KubernetesExecutor.from_settings(settings)
    try:
        assert executor.sweep(active_run_ids=[]) == []
    finally:
        executor.close()
    request = fake.requests_of("GET", "/namespaces/agents/jobs")[0]
    assert request.headers["authorization"] == "Bearer kube-token"
    with pytest.raises(ExecutorError, match="kubeconfig"):
        KubernetesExecutor(KubernetesSettings(image="a", node_name="n1",
                                              kubeconfig=tmp_path / "missing"))


def test_missing_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(ExecutorError, match=r"pip install 'runyard\[kubernetes\]'"):
        KubernetesExecutor(KubernetesSettings(image="a", node_name="n1"))


def test_cleanup_stops_copying_a_running_pods_log(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    fake.write_log(JOB, b"before\n")
    wait_for(lambda: run_spec.log_path.read_bytes() == b"before\n")
    executor.cleanup(handle)
    assert "k8s-log-run-1" not in {t.name for t in threading.enumerate()}
    fake.write_log(JOB, b"after\n")
    assert run_spec.log_path.read_bytes() == b"before\n"


def test_wait_exit_polls_until_the_pod_ends_and_gives_up_at_its_timeout(
    fake: FakeKubernetes, executor: KubernetesExecutor, run_spec: LaunchSpec
) -> None:
    handle = executor.launch(run_spec)
    fake.start_container(JOB)
    started = time.monotonic()
    assert executor.wait_exit(handle, timeout=0.3) is None  # still running
    assert time.monotonic() - started >= 0.3
    ending = threading.Timer(0.2, fake.terminate, args=(JOB, 4))
    ending.start()
    info = executor.wait_exit(handle, timeout=10)
    ending.join()
    assert info is not None and info.exit_code == 4
    executor.cleanup(handle)
