"""A task definition's pod template end to end: a real server → the real ``kubernetes`` client
→ the fake API server → the test kubelet, which runs the worker with the pod's volumes and
environment. The template's environment entry and ``emptyDir`` volume reach the task's
process, its toleration and annotation reach the Job, and runyard's hardening is intact."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runyard
from serverproc import start_server

pytest.importorskip("kubernetes")
pytestmark = pytest.mark.sandbox
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_cluster import write_kubeconfig  # noqa: E402
from k8s_fake_api import FakeKubernetes  # noqa: E402
from k8s_kubelet import Kubelet  # noqa: E402

IMAGE_PATHS = tuple(sorted({
    str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, Path(runyard.__file__).parents[1])
    if not str(Path(p).resolve()).startswith("/usr")
}))  # fmt: skip
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TEMPLATE = {
    "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "tolerations": [TOLERATION],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "containers": [{
            "name": "worker",
            "env": [{"name": "FROM_TEMPLATE", "value": "set-by-the-template"}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        }],
    },
}  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKubernetes, Path]]:
    fake = FakeKubernetes().start()
    kubelet = Kubelet(fake, image_paths=IMAGE_PATHS).start()
    yield fake, write_kubeconfig(fake, tmp_path / "kubeconfig")
    kubelet.stop()
    fake.stop()


def test_a_task_definitions_template_reaches_its_pod(
    cluster: tuple[FakeKubernetes, Path], tmp_path: Path
) -> None:
    fake, kubeconfig = cluster
    k8s: dict[str, Any] = {
        "image": "registry.example/runyard:1", "kubeconfig": str(kubeconfig),
        "request_timeout_seconds": 5, "python": sys.executable, "record_poll_seconds": 0.2,
        "node_selector": {"kubernetes.io/hostname": "test-node"},
        "task_pod_templates": {"command": TEMPLATE},
    }  # fmt: skip
    config = {"kubernetes": k8s, "task_executors": {"command": "kubernetes"}}
    server = start_server(tmp_path / "srv", config=config)
    try:
        script = "echo $FROM_TEMPLATE > /scratch/note && cat /scratch/note"
        handle = server.call("submit", task="command", command=f"sh -c '{script}'")["answer"]
        final = server.call("wait_task", timeout=90, task_id=handle["task_id"],
                            run_id=handle["run_id"], poll_interval=0.2)["answer"]  # fmt: skip
        assert final["state"] == "succeeded", final
        assert "set-by-the-template" in Path(final["log_path"]).read_text()
        job = fake.requests_of("POST", "/jobs")[-1].body
        pod = job["spec"]["template"]["spec"]
        assert pod["tolerations"] == [TOLERATION]
        assert job["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == (
            "false"
        )
        worker = pod["containers"][0]
        assert worker["securityContext"]["readOnlyRootFilesystem"] is True
        assert worker["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        # a task of another definition runs locally, and would get no template
        other = server.call("submit", task="demo", x=1, y=2)["answer"]
        assert server.call("wait_task", timeout=60, task_id=other["task_id"],
                           run_id=other["run_id"])["answer"]["state"] == "succeeded"  # fmt: skip
        assert len(fake.requests_of("POST", "/jobs")) == 1
    finally:
        server.stop()
