"""``runyard kubernetes manifests``: the Namespace enforces Pod Security ``restricted``, which
the server's pod and a run pod in pvc mode both meet (the rules checked here are the
level's own); the probes are HTTP (a startupProbe, then liveness and readiness), none forks
a process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.executors.base import LaunchSpec, Mount
from runyard.executors.kubernetes.deployment import DeployOptions, deployment_manifests
from runyard.executors.kubernetes.manifests import build_manifests
from runyard.executors.kubernetes.names import RUN_ID_LABEL
from runyard.kubernetes_settings import KubernetesSettings

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}  # fmt: skip


def by_kind(kind: str) -> dict[str, Any]:
    return next(d for d in deployment_manifests(DeployOptions()) if d["kind"] == kind)


def assert_restricted(pod: dict[str, Any]) -> None:
    """Pod Security "restricted" (v1.25+), as the admission controller checks a pod."""
    context = pod.get("securityContext") or {}
    assert context.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost")
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(flag)
    for volume in pod.get("volumes") or []:
        assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, volume
    for container in pod["containers"] + (pod.get("initContainers") or []):
        own = container.get("securityContext") or {}
        assert own.get("allowPrivilegeEscalation") is False and not own.get("privileged")
        assert own.get("capabilities", {}).get("drop") == ["ALL"]
        assert not own.get("capabilities", {}).get("add")
        assert own.get("runAsNonRoot", context.get("runAsNonRoot")) is True
        assert own.get("runAsUser", context.get("runAsUser")) != 0
        assert all("hostPort" not in port for port in container.get("ports") or [])


def test_the_namespace_enforces_restricted_pod_security() -> None:
    labels = by_kind("Namespace")["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_the_servers_pod_and_a_pvc_run_pod_meet_restricted(tmp_path: Path) -> None:
    assert_restricted(by_kind("Deployment")["spec"]["template"]["spec"])
    settings = KubernetesSettings(image="registry.example/runyard:1", volume_mode="pvc",
                                  pvc_name="runyard-data", pvc_host_root=tmp_path)  # fmt: skip
    work = tmp_path / "workspace"
    spec = LaunchSpec(argv=["python", "-m", "runyard.runtime.worker"], stdin=b"{}",
                      log_path=tmp_path / "logs" / "run.log", mounts=[Mount(work, str(work))],
                      labels={RUN_ID_LABEL: "run-1"})  # fmt: skip
    job = build_manifests(spec, settings, "run-1", None).job
    assert_restricted(job["spec"]["template"]["spec"])


def test_the_probes_are_http_and_readiness_waits_for_the_start_up() -> None:
    server = by_kind("Deployment")["spec"]["template"]["spec"]["containers"][0]
    startup, live, ready = (server[k] for k in ("startupProbe", "livenessProbe", "readinessProbe"))
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # a slow first start
    assert live["httpGet"]["path"] == "/health"
    assert ready["httpGet"] == {"path": "/health?ready=1", "port": "http"}
    assert not any("exec" in probe for probe in (startup, live, ready))
