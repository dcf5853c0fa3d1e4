"""Every kind of manifest the executor builds validates with ``kubernetes-validate --strict``
(the published OpenAPI schemas, unknown fields refused) for an older and a current minor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import utils as kv

from runyard.executors.base import LaunchSpec, Limits, Mount
from runyard.executors.kubernetes.manifests import build_manifests, owned_by
from runyard.executors.kubernetes.names import RUN_ID_LABEL
from runyard.executors.kubernetes.package import read_package
from runyard.executors.kubernetes.placement import resolve_settings
from runyard.kubernetes_settings import KubernetesSettings

VERSIONS = ("1.25.0", "1.37.0")  # the oldest and newest minors the schemas ship


def variants(tmp_path: Path) -> list[tuple[KubernetesSettings, LaunchSpec, Any]]:
    work = tmp_path / "srv" / "run-1"
    work.mkdir(parents=True)
    package = tmp_path / "srv" / "pkg"
    package.mkdir()
    (package / "main.py").write_text("print(1)\n")
    base: dict[str, Any] = {"image": "registry.example/agent:1"}
    host = resolve_settings(KubernetesSettings(**base, node_name="node-a", instance="ry-1"))
    pvc = resolve_settings(KubernetesSettings(
        **base, volume_mode="pvc", pvc_name="data", pvc_host_root=tmp_path / "srv",
        resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}},
        image_pull_secrets=["pull"], service_account="runner", node_selector={"pool": "a"}))
    spec = LaunchSpec(
        argv=["python", "/opt/agent/package/main.py"], log_path=tmp_path / "run.log",
        env={"RUNYARD_TOKEN": "secret", "MODE": "x"}, stdin=b"{}", cwd=Path("/workspace"),
        mounts=[Mount(work, "/workspace"), Mount(package, "/opt/agent/package", True)],
        labels={RUN_ID_LABEL: "run-1", "session": "s 1"},
        limits=Limits(timeout_seconds=30, cpu=0.5, memory_bytes=1 << 30), network=False,
    )
    plain = LaunchSpec(argv=["true"], log_path=tmp_path / "run.log",
                       labels={RUN_ID_LABEL: "run-2"}, network=True)
    return [(host, spec, read_package(package)), (pvc, spec, None), (host, plain, None),
            (pvc, plain, None)]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_generated_manifest_validates_strictly(tmp_path: Path, version: str) -> None:
    checked = 0
    for settings, spec, package in variants(tmp_path):
        manifests = build_manifests(spec, settings, spec.labels[RUN_ID_LABEL], package)
        for body in [manifests.job, *manifests.dependents]:
            owned = owned_by(body, manifests.name, "0b8f7f3e-2a53-4c1e-9d2a-7a4d3c1b2a10")
            for item in (body, owned):
                assert kv.validate(item, version, strict=True) == version.rpartition(".")[0]
                checked += 1
    assert checked == 2 * (4 + 3 + 1 + 1 + 1 + 1)  # Jobs, ConfigMap, Secrets, policies


def test_the_validator_refuses_what_a_server_would() -> None:
    bad = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "i",
                                                          "securityContext": {"fsGroup": 1}}]}}}}
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[0], strict=True)
