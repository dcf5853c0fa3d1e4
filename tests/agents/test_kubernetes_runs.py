"""Agent runs as Kubernetes Jobs (``agent_executor: kubernetes``), against the in-memory
API server of tests/executors: the pod layout as volumes, the token in a Secret, the
answer folded when the pod ends, adoption of a Job after a restart, and cancel."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import add_artifact, wait_done
from agent_support import agent_settings

from runyard.agents.layout import AgentLayout
from runyard.agents.models import Run
from runyard.agents.runs import RunRequest
from runyard.agents.store import SQLiteStore
from runyard.api.agentservice import AgentService
from runyard.executors.kubernetes.names import resource_name
from runyard.runtime.agentlaunch import POD_EXIT_FILE, POD_EXIT_RECORDER
from runyard.wire import TaskState

pytest.importorskip("kubernetes")
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_fake_api import FakeKubernetes  # noqa: E402
from kubernetes.client import ApiClient, Configuration  # noqa: E402

from runyard.executors.kubernetes import KubernetesExecutor  # noqa: E402

K8S = {"image": "registry.example/agent:1", "node_name": "node-a", "log_retry_seconds": 0.05, "log_drain_seconds": 1}


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


@pytest.fixture
def make(fake: FakeKubernetes, tmp_path: Path) -> Iterator[Callable[[], AgentService]]:
    made: list[AgentService] = []

    def build() -> AgentService:
        settings = agent_settings(tmp_path, "none", agent_executor="kubernetes", kubernetes=K8S)
        assert settings.kubernetes is not None
        executor = KubernetesExecutor(settings.kubernetes, ApiClient(Configuration(host=fake.url)))
        layout = AgentLayout(settings.workspace_dir.absolute() / "agent", settings.log_dir)
        layout.ensure()
        service = AgentService(settings, layout, SQLiteStore(layout.db_path), executor)
        service.start()
        made.append(service)
        return service

    yield build
    for service in made:
        service.stop()


def job_of(run: Run) -> str:
    return resource_name(run.id)


def container(fake: FakeKubernetes, run: Run) -> dict[str, Any]:
    spec = fake.job(job_of(run))["spec"]["template"]["spec"]
    return spec["containers"][0]  # type: ignore[no-any-return]


def test_a_run_becomes_a_job_with_the_pod_layout(
    fake: FakeKubernetes, make: Callable[[], AgentService]
) -> None:
    service = make()
    session = service.catalog.create_session()
    add_artifact(service, session.id, b"a,b\n", rel="data/prices.csv")
    run = service.runs.create(RunRequest(session.id, "summarise", package="probe"))
    assert run.state == TaskState.RUNNING and run.isolation == "kubernetes"
    worker = container(fake, run)
    # the image's shell records the exit code in the run's tmp/, then runs the agent
    recorder = ["/bin/sh", "-c", POD_EXIT_RECORDER, "runyard-run", "/workspace/tmp/" + POD_EXIT_FILE]
    assert worker["command"][:6] == [*recorder, "python3"]
    targets = {m["mountPath"] for m in worker["volumeMounts"]}
    assert {"/workspace/in", "/workspace/out", "/workspace/tmp", "/workspace/state",
            "/opt/agent/package", "/var/run/runyard-api"} <= targets  # fmt: skip
    env = {e["name"]: e for e in worker["env"]}
    assert env["RUNYARD_WORKSPACE"]["value"] == "/workspace"
    assert "valueFrom" in env["RUNYARD_API_TOKEN"]  # the token travels in a Secret
    context = (service.layout.run_subdir(run.id, "in") / "run-context.json").read_text()
    assert '"isolation":"kubernetes"' in context and '"placement":"copy"' in context
    out = service.layout.run_subdir(run.id, "out")
    (out / "final-answer.md").write_text("from the pod")  # what the pod writes to its volume
    fake.start_container(job_of(run))
    fake.terminate(job_of(run), 0)
    done = wait_done(service, run.id)
    assert done.state == TaskState.SUCCEEDED and done.exit_code == 0
    assert service.catalog.session(session.id).history[-1].content == "from the pod"


def test_a_job_is_adopted_after_a_restart_and_can_be_cancelled(
    fake: FakeKubernetes, make: Callable[[], AgentService]
) -> None:
    service = make()
    session = service.catalog.create_session()
    first = service.runs.create(RunRequest(session.id, "one", package="probe"))
    fake.start_container(job_of(first))
    service.stop()
    restarted = make()
    assert restarted.runs.run(first.id).state == TaskState.RUNNING
    fake.terminate(job_of(first), 3)
    failed = wait_done(restarted, first.id)
    assert failed.state == TaskState.FAILED and failed.exit_code == 3
    second = restarted.runs.create(RunRequest(session.id, "two", package="probe"))
    fake.start_container(job_of(second))
    cancelled = restarted.runs.cancel(second.id)
    assert cancelled.state == TaskState.CANCELLED
    deadline = time.monotonic() + 5
    while job_of(second) in {name for (kind, _, name) in fake.objects if kind == "Job"}:
        assert time.monotonic() < deadline, "the Job was not deleted"
        time.sleep(0.02)


def test_cancel_under_a_slow_garbage_collector_is_recorded_at_once(
    fake: FakeKubernetes, make: Callable[[], AgentService]
) -> None:
    service = make()
    session = service.catalog.create_session()
    run = service.runs.create(RunRequest(session.id, "slow", package="probe"))
    fake.start_container(job_of(run))
    fake.gc_delay = 30.0  # the Job lingers with a deletionTimestamp long after the cancel
    assert service.runs.cancel(run.id).state == TaskState.CANCELLED
    deadline = time.monotonic() + 10
    while (done := service.runs.run(run.id)).exit_code is None:
        assert time.monotonic() < deadline, "the cancelled run's end was not recorded"
        time.sleep(0.02)
    assert done.state == TaskState.CANCELLED and done.exit_code == 130  # agent-packages.md
    # read -15 from the lingering Job, then deleted it (Background): no wait for the GC
    assert fake.requests_of("DELETE", f"/jobs/{job_of(run)}")[-1].query == {
        "propagationPolicy": "Background"}
