"""A submit's resources reach the Job a real server creates on a (fake) Kubernetes API: the
GPU limit, the type's node selector, the CPU and memory requests and limits; the local GPU
list does not bound a run sent to Kubernetes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverproc import ServerProcess, start_server, until

pytest.importorskip("kubernetes")
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_cluster import write_kubeconfig  # noqa: E402
from k8s_fake_api import FakeKubernetes  # noqa: E402


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKubernetes, Path]]:
    fake = FakeKubernetes().start()  # no kubelet: the Job is created, its pod never starts
    yield fake, write_kubeconfig(fake, tmp_path / "kubeconfig")
    fake.stop()


@pytest.fixture
def server(cluster: tuple[FakeKubernetes, Path], tmp_path: Path) -> Iterator[ServerProcess]:
    k8s = {
        "image": "registry.example/runyard:1", "kubeconfig": str(cluster[1]),
        "request_timeout_seconds": 5, "python": sys.executable,
        "node_selector": {"kubernetes.io/hostname": "test-node"},
    }  # fmt: skip
    config = {"kubernetes": k8s, "gpus": [], "cancel_grace_seconds": 1.0}
    srv = start_server(tmp_path / "srv", config=config)
    try:
        yield srv
    finally:
        srv.stop()


def test_a_submits_resources_shape_the_job_it_creates(
    cluster: tuple[FakeKubernetes, Path], server: ServerProcess
) -> None:
    fake, _ = cluster
    resources = {"gpus": 2, "gpu_type": "NVIDIA-H100-80GB-HBM3", "cpus": 1.5, "memory_mb": 3072}
    reply = server.call(
        "submit", task="demo", x=1, y=2, executor="kubernetes", resources=resources
    )  # more GPUs than this host hands out (none): not this host's to refuse
    assert reply["success"] is True, reply
    handle = reply["answer"]
    until(lambda: fake.requests_of("POST", "/jobs") or None, 30)
    job = fake.requests_of("POST", "/jobs")[-1].body
    pod = job["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    assert worker["resources"] == {
        "requests": {"cpu": "1500m", "memory": "3072Mi"},
        "limits": {"memory": str(3072 << 20), "cpu": "1500m", "nvidia.com/gpu": "2"},
    }
    assert pod["nodeSelector"] == {
        "kubernetes.io/hostname": "test-node",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    assert "CUDA_VISIBLE_DEVICES" not in {e["name"] for e in worker["env"]}
    status = server.call("status", task_id=handle["task_id"])["answer"]
    assert status["resources"] == resources
    assert status["limits"]["limits"]["cpu"] == "1500m"
    assert server.call("cancel", task_id=handle["task_id"])["success"] is True

    # the same ask run locally is refused: this server hands out no GPU
    with server.client() as client:
        refused = client.post("/jobs/submit", json={"arguments": {
            "task": "demo", "x": 1, "y": 2, "resources": {"gpus": 1}}})  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert "0 GPUs" in refused.json()["detail"]
