"""Agent runs end to end on Kubernetes without a cluster: a real server with
``agent_executor: kubernetes`` → the real ``kubernetes`` client → the fake API server →
the test kubelet, which really runs the pod's command (in bubblewrap, the pod's volumes at
their paths) → the agent package → its answer recorded by the server.

Covers success (the reference agent, its demo task through the Job API socket), failure,
cancel (the pod's process is killed), a pod deleted under a run (a node loss), and the
``pvc`` volume mode (the run's folders reach the pod as subPaths of the claim)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from api_helpers import agent_server, api, create_run, new_session, wait_run

from serverproc import ServerProcess

pytest.importorskip("kubernetes")
pytestmark = pytest.mark.sandbox
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_fake_api import FakeKubernetes  # noqa: E402
from k8s_kubelet import Container, Kubelet  # noqa: E402

IMAGE = "registry.example/runyard:1"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKubernetes, Kubelet, Path]]:
    fake = FakeKubernetes().start()
    kubelet = Kubelet(fake).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }))  # fmt: skip
    yield fake, kubelet, kubeconfig
    kubelet.stop()
    fake.stop()


@pytest.fixture
def server(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> Iterator[ServerProcess]:
    _, _, kubeconfig = cluster
    k8s = {"image": IMAGE, "kubeconfig": str(kubeconfig), "request_timeout_seconds": 5,
           "log_retry_seconds": 0.05, "log_drain_seconds": 2,
           # hostPath volumes: the pods must land on this node
           "node_selector": {"kubernetes.io/hostname": "test-node"}}  # fmt: skip
    proc = agent_server(tmp_path / "srv", "none", agent_executor="kubernetes", kubernetes=k8s,
                        cancel_grace_seconds=1.0)  # fmt: skip
    yield proc
    proc.stop()


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def container_of(kubelet: Kubelet, run_id: str) -> Container:
    def find() -> Container | None:
        for container in list(kubelet.containers.values()):
            if container.job and run_id.lower()[:20] in container.job:
                return container
        return None

    return wait_for(find)  # type: ignore[no-any-return]


def test_the_reference_agent_runs_in_a_pod_and_its_answer_is_recorded(
    cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = cluster
    with api(server) as client:
        session = new_session(client)
        run = create_run(client, session, "what is in the pod?")
        assert run["isolation"] == "kubernetes"
        done = wait_run(client, run["id"])
        assert done["state"] == "succeeded", done
        answer = client.get(f"/runs/{run['id']}/files/final-answer.md").text
        assert "isolation kubernetes" in answer and "what is in the pod?" in answer
        report = json.loads(client.get(f"/runs/{run['id']}/files/report.json").content)
        assert report["demo"]["success"] is True  # a task submitted over the API socket
        history = client.get(f"/sessions/{session}").json()["history"]
        assert history[-1]["content"] == answer
    container = container_of(kubelet, run["id"])
    assert container.proc.returncode == 0  # the kubelet really ran it
    pod = fake.logs[container.pod].decode()
    assert "reference agent: wrote out/final-answer.md" in pod


def test_a_failing_run_a_cancelled_run_and_a_lost_pod(
    cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = cluster
    with api(server) as client:
        session = new_session(client)
        failing = create_run(client, session, "answer partial\nexit 3", package="probe")
        failed = wait_run(client, failing["id"])
        assert failed["state"] == "failed" and failed["exitCode"] == 3, failed

        slow = create_run(client, session, "sleep 60", package="probe")
        running = container_of(kubelet, slow["id"])
        wait_for(lambda: b"probe: sleep 60" in fake.logs.get(running.pod, b""))
        reply = client.post(f"/runs/{slow['id']}/cancel", json={})
        assert reply.status_code == 200, reply.text
        cancelled = wait_run(client, slow["id"])
        assert cancelled["state"] == "cancelled", cancelled
        wait_for(lambda: running.proc.poll() is not None, timeout=10)  # the pod's process died

        lost = create_run(client, session, "sleep 60", package="probe")
        victim = container_of(kubelet, lost["id"])
        wait_for(lambda: b"probe: sleep 60" in fake.logs.get(victim.pod, b""))
        deleted = httpx.delete(f"{fake.url}/api/v1/namespaces/default/pods/{victim.pod}",
                               params={"gracePeriodSeconds": "0"})  # fmt: skip
        assert deleted.status_code == 200  # what a node loss or an eviction does to it
        ended = wait_run(client, lost["id"])
        # the Job failed with no container exit code: 255 (executors/kubernetes/status.py);
        # the executor's reason (BackoffLimitExceeded) is not yet carried into the run's error
        assert ended["state"] == "failed" and ended["exitCode"] == 255, ended
        assert victim.proc.poll() is not None


def test_in_pvc_mode_the_pod_sees_the_run_through_the_claim(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> None:
    # the claim is the folder holding workspace and logs, as /data in the Deployment
    fake, kubelet, kubeconfig = cluster
    # a short root: the run's socket must live on the claim, and a long test path (parallel
    # workers nest deeper) would push it past the Unix socket length to /tmp, off the claim
    root = Path(tempfile.mkdtemp(prefix="ry-claim-", dir="/tmp"))
    kubelet.claims["runyard-data"] = root
    k8s = {"image": IMAGE, "kubeconfig": str(kubeconfig), "request_timeout_seconds": 5,
           "log_retry_seconds": 0.05, "log_drain_seconds": 2, "volume_mode": "pvc",
           "pvc_name": "runyard-data", "pvc_host_root": str(root)}  # fmt: skip
    server = agent_server(root, "none", agent_executor="kubernetes", kubernetes=k8s)
    try:
        with api(server) as client:
            run = create_run(client, new_session(client), "through the claim")
            done = wait_run(client, run["id"])
            assert done["state"] == "succeeded", (done["error"], done["exitCode"])
            report = json.loads(client.get(f"/runs/{run['id']}/files/report.json").content)
            assert report["demo"]["success"] is True
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    pod = fake.requests_of("POST", "/jobs")[-1].body["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v]  # fmt: skip
    assert claims == ["runyard-data"] and all("hostPath" not in v for v in pod["volumes"])
    assert all(m.get("subPath") for m in pod["containers"][0]["volumeMounts"]
               if m["mountPath"].startswith("/workspace"))  # fmt: skip

