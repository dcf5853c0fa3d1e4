"""``runyard kubernetes job`` with a pod template from ``runyard.yaml``: a toleration, a GPU
limit and a runtime class reach the printed Job, which validates with
``kubernetes-validate --strict`` and keeps every hardening field; a template that sets
``privileged: true`` stops the command at settings load, naming the field."""

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
TEMPLATE = """\
kubernetes:
  image: registry.example/runyard:3
  node_name: node-a
  pod_template:
    metadata: {annotations: {sidecar.istio.io/inject: "false"}}
    spec:
      runtimeClassName: nvidia
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  task_pod_templates:
    demo:
      spec:
        containers:
          - name: worker
            image: registry.example/cuda-runyard:3
            resources: {limits: {nvidia.com/gpu: 1}}
"""


def run_job(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", "kubernetes", "job", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, env=clean,
    )  # fmt: skip


def test_a_gpu_template_is_printed_valid_and_hardened(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text(TEMPLATE)
    done = run_job(tmp_path, "demo", "x=1", "y=2")
    assert done.returncode == 0, done.stderr
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(done.stdout) if d is not None]
    for version in VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)
    job = docs[0]
    pod = job["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["image"] == "registry.example/cuda-runyard:3"
    assert job["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    # every hardening field runyard sets, unchanged
    assert worker["securityContext"] == {
        "allowPrivilegeEscalation": False, "privileged": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    }  # fmt: skip
    assert pod["securityContext"] == {
        "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch", "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert worker["command"][-3:] == ["python", "-m", "runyard.runtime.worker"]
    assert pod["affinity"]["nodeAffinity"]  # still pinned to runyard's node (hostPath mode)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("securityContext: {privileged: true}", "securityContext.privileged"),
        ("command: [sh, -c, 'id']", "containers[worker].command"),
    ],
)
def test_a_loosening_template_stops_the_command_naming_the_field(
    tmp_path: Path, extra: str, field: str
) -> None:
    loosening = TEMPLATE + f"            {extra}\n"
    (tmp_path / "runyard.yaml").write_text(loosening)
    done = run_job(tmp_path, "demo", "x=1", "y=2")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert "kubernetes.task_pod_templates.demo" in done.stderr and field in done.stderr
