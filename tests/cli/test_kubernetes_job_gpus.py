"""A run's resources on Kubernetes, seen through ``runyard kubernetes job``: GPUs as the
configured extended resource's limit, a GPU type as a node selector, CPUs and memory as the
worker's requests and limits, with a pod template's toleration and runtime class merged on
and every hardening field kept; valid under the strict schemas of two minors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

VERSIONS = ("1.37.0", "1.33.0")
CONFIG = """\
kubernetes:
  image: registry.example/runyard:3
  node_name: node-a
  pod_template:
    spec:
      runtimeClassName: nvidia
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
task_resources:
  demo: {gpus: 2, gpu_type: NVIDIA-A100-SXM4-80GB, cpus: 4, memory_mb: 8192}
"""
HARDENED = {"allowPrivilegeEscalation": False, "privileged": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}  # fmt: skip


def run_job(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", "kubernetes", "job", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, env={**clean, **env},
    )  # fmt: skip


def job_of(tmp_path: Path, config: str, **env: str) -> dict[str, Any]:
    (tmp_path / "runyard.yaml").write_text(config)
    done = run_job(tmp_path, "demo", "x=1", "y=2", **env)
    assert done.returncode == 0, done.stderr
    docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]
    for version in VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)
    return docs[0]  # type: ignore[no-any-return]


def test_gpus_cpus_and_memory_shape_the_job_with_the_template_and_the_hardening(
    tmp_path: Path,
) -> None:
    job = job_of(tmp_path, CONFIG)
    pod = job["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    assert worker["resources"] == {
        "requests": {"cpu": "4000m", "memory": "8192Mi"},
        "limits": {"memory": str(8192 << 20), "cpu": "4000m", "nvidia.com/gpu": "2"},
    }
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["runtimeClassName"] == "nvidia"
    assert {k: worker["securityContext"][k] for k in HARDENED} == HARDENED
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    env = {e["name"] for e in worker["env"]}
    assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin says which devices


def test_the_resource_name_and_the_type_label_are_settings(tmp_path: Path) -> None:
    job = job_of(
        tmp_path, CONFIG,
        RUNYARD_KUBERNETES__GPU_RESOURCE="amd.com/gpu",
        RUNYARD_KUBERNETES__GPU_TYPE_LABEL="amd.com/gpu.product-name",
    )  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert pod["nodeSelector"] == {"amd.com/gpu.product-name": "NVIDIA-A100-SXM4-80GB"}


def test_a_task_without_resources_gets_no_gpu_and_the_configured_requests(
    tmp_path: Path,
) -> None:
    job = job_of(tmp_path, CONFIG.split("task_resources:")[0])
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"},
    }  # fmt: skip
    assert "nodeSelector" not in pod


@pytest.mark.parametrize(
    ("setting", "value"),
    [("GPU_RESOURCE", "gpu"), ("GPU_RESOURCE", "nvidia.com/gpu x"), ("GPU_TYPE_LABEL", "a b")],
)
def test_a_bad_gpu_setting_is_one_clear_error(tmp_path: Path, setting: str, value: str) -> None:
    (tmp_path / "runyard.yaml").write_text(CONFIG)
    done = run_job(tmp_path, "demo", "x=1", "y=2", **{f"RUNYARD_KUBERNETES__{setting}": value})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and setting.lower() in done.stderr
    assert "Traceback" not in done.stderr
