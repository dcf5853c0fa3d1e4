"""A dependent (Secret, NetworkPolicy, ConfigMap) whose create was done but whose answer was
lost (503 after creating) is retried into 409: when the object there is this Job's, the
launch goes on; an object of the same name that is not this run's still fails it. Played by
the fake API server through the real ``kubernetes`` client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from k8s_fake_api import FakeKubernetes
from kubernetes.client import ApiClient, Configuration

from runyard.errors import ExecutorError
from runyard.executors.base import LaunchSpec, Limits, Mount
from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings
from runyard.executors.kubernetes.manifests import build_manifests
from runyard.executors.kubernetes.names import INSTANCE_LABEL, RUN_ID_LABEL

JOB = "runyard-run-1"
MANAGED = "app.kubernetes.io/managed-by"


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


@pytest.fixture
def make_executor(fake: FakeKubernetes) -> Iterator[Callable[[], KubernetesExecutor]]:
    made: list[KubernetesExecutor] = []

    def make() -> KubernetesExecutor:
        settings = KubernetesSettings(
            image="registry.example/agent:1", node_name="node-a", instance="ry-me",
            request_timeout_seconds=5, retry_base_seconds=0.01, retry_max_seconds=5,
        )  # fmt: skip
        client = ApiClient(Configuration(host=fake.url))
        executor = KubernetesExecutor(settings, client, sweeping=False, watching=False)
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
        env={"RUNYARD_TOKEN": "t0k"}, mounts=[Mount(workspace, "/workspace")], stdin=b"{}",
        labels={RUN_ID_LABEL: "run-1"}, limits=Limits(timeout_seconds=600), network=False,
    )  # fmt: skip


def objects(fake: FakeKubernetes, kind: str) -> list[dict[str, Any]]:
    return [o for (k, _, _), o in fake.objects.items() if k == kind]


@pytest.mark.parametrize(("kind", "path"), [("Secret", "/secrets"),
                                            ("NetworkPolicy", "/networkpolicies")])  # fmt: skip
def test_a_dependent_created_with_its_answer_lost_counts_as_created(
    fake: FakeKubernetes, make_executor: Callable[[], KubernetesExecutor], run_spec: LaunchSpec,
    kind: str, path: str,
) -> None:  # fmt: skip
    executor = make_executor()
    fake.inject("POST", path, 503, apply=True)  # created, but the answer is lost
    handle = executor.launch(run_spec)
    assert len(fake.requests_of("POST", path)) == 2  # the retry met 409 AlreadyExists
    job = fake.job(JOB)
    assert job["spec"]["suspend"] is False  # resumed: the launch went on
    assert handle.data["job_uid"] == job["metadata"]["uid"]
    made = objects(fake, kind)
    assert len(made) == 1
    assert made[0]["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]


def test_a_planted_object_of_the_same_name_fails_the_launch(
    fake: FakeKubernetes, make_executor: Callable[[], KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    # someone else's Secret under the run's name, claiming the run's labels, with a token
    # of their own in it: the run must not start with it mounted as its stdin
    executor = make_executor()
    labels = {MANAGED: "runyard", RUN_ID_LABEL: "run-1", INSTANCE_LABEL: "ry-me"}
    planted = {"metadata": {"name": JOB, "labels": labels}, "type": "Opaque",
               "data": {"stdin": "ZXZpbA=="}}  # fmt: skip
    fake.add("Secret", planted, datetime.now(UTC))
    with pytest.raises(
        ExecutorError, match="Secret default/runyard-run-1 already exists and is not"
    ):
        executor.launch(run_spec)
    assert objects(fake, "Job") == [] or fake.job(JOB)["metadata"].get("deletionTimestamp")


def test_an_object_of_another_instance_is_not_taken_for_this_runs(
    fake: FakeKubernetes, make_executor: Callable[[], KubernetesExecutor], run_spec: LaunchSpec
) -> None:
    # the very policy this run would make, but another server's (another workspace)
    executor = make_executor()
    ours = build_manifests(run_spec, executor.settings, "run-1", None).dependents[-1]
    labels = {**ours["metadata"]["labels"], INSTANCE_LABEL: "ry-other"}
    policy = {"metadata": {"name": JOB, "labels": labels}, "spec": ours["spec"]}
    fake.add("NetworkPolicy", policy, datetime.now(UTC))
    with pytest.raises(ExecutorError, match="NetworkPolicy default/runyard-run-1 already exists"):
        executor.launch(run_spec)
