"""Pure builders of the objects one run needs: a suspended Job and what it owns.

    manifests = build_manifests(spec, settings, package)
    manifests.job                  # batch/v1 Job, spec.suspend = True
    manifests.dependents           # ConfigMap / Secret / NetworkPolicy, created after the Job
    owned_by(manifests.dependents[0], job_name, job_uid)   # with ownerReferences to the Job

No secret value appears in the Job: secret variables are ``secretKeyRef`` entries and stdin
is a Secret key mounted as a file. Everything here is plain dicts, ready for the API.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from runyard.executors.base import LaunchSpec, Mount
from runyard.executors.kubernetes import container as ctr
from runyard.executors.kubernetes.gpus import with_gpus
from runyard.executors.kubernetes.names import (
    AGENT_RUN_LABEL,
    CONTAINER_NAME,
    INSTANCE_LABEL,
    LOG_FILE_ENV,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PACKAGE_TARGET,
    RUN_ID_LABEL,
    SERVER_LABELS,
    STDIN_DIR,
    STDIN_KEY,
    TMP_TARGET,
    resource_name,
    split_labels,
)
from runyard.executors.kubernetes.package import PackageFiles
from runyard.executors.kubernetes.template import apply_templates, templates_for
from runyard.executors.kubernetes.volumes import plan_volumes
from runyard.kubernetes_settings import KubernetesSettings, ResourceSettings

RESUME_PATCH: dict[str, Any] = {"spec": {"suspend": False}}


@dataclass(frozen=True)
class RunOptions:
    """What differs between runs of one executor: a task run writes its own log on the
    shared volume (``log_in_pod``), and its definition (``task``) may have its own
    ``resources`` and pod template."""

    log_in_pod: bool = False
    resources: ResourceSettings | None = None
    task: str | None = None
    gpus: int = 0  # the run's resources.gpus and gpu_type (executors/kubernetes/gpus.py)
    gpu_type: str | None = None


@dataclass(frozen=True)
class RunManifests:
    run_id: str
    name: str
    job: dict[str, Any]
    dependents: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Meta:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]

    def render(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "labels": dict(self.labels)}
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return meta


def split_package_mount(mounts: list[Mount]) -> tuple[Mount | None, list[Mount]]:
    """The mount targeting ``/opt/agent/package`` (shipped as a ConfigMap) and the rest."""
    package = [m for m in mounts if m.target == PACKAGE_TARGET]
    return (package[0] if package else None), [m for m in mounts if m.target != PACKAGE_TARGET]


def _metadata(spec: LaunchSpec, run_id: str, instance: str | None) -> _Meta:
    labels, annotations = split_labels(spec.labels)
    labels.update({MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: run_id})
    if instance is not None:
        labels[INSTANCE_LABEL] = instance
    return _Meta(resource_name(run_id), labels, annotations)


def _special_volumes(
    meta: _Meta, package: PackageFiles | None, stdin: bool, tmp_mounted: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if not tmp_mounted:  # the root file system is read-only: /tmp must come from somewhere
        volumes.append({"name": "tmp", "emptyDir": {}})
        mounts.append({"name": "tmp", "mountPath": TMP_TARGET})
    if package is not None:
        source = {"name": meta.name, "items": package.items, "defaultMode": 0o444}
        volumes.append({"name": "agent-package", "configMap": source})
        mounts.append({"name": "agent-package", "mountPath": PACKAGE_TARGET, "readOnly": True})
    if stdin:
        items = [{"key": STDIN_KEY, "path": STDIN_KEY}]
        source = {"secretName": meta.name, "items": items, "defaultMode": 0o440}
        volumes.append({"name": "runyard-stdin", "secret": source})
        mounts.append({"name": "runyard-stdin", "mountPath": STDIN_DIR, "readOnly": True})
    return volumes, mounts


def _container(
    spec: LaunchSpec, settings: KubernetesSettings, env: ctr.EnvSplit, meta: _Meta,
    options: RunOptions,
) -> dict[str, Any]:  # fmt: skip
    stdin = bool(spec.stdin)
    entries = ctr.env_entries(env, meta.name, stdin)
    if options.log_in_pod:
        entries.append({"name": LOG_FILE_ENV, "value": ctr.escape_expansion(str(spec.log_path))})
    body: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ctr.command(spec.argv, stdin, settings, options.log_in_pod),
        "env": entries,
        "securityContext": ctr.container_security_context(),
    }
    body["resources"] = ctr.resources(spec.limits, options.resources or settings.resources)
    return body


def _pod_spec(
    spec: LaunchSpec, settings: KubernetesSettings, package: PackageFiles | None, meta: _Meta,
    options: RunOptions,
) -> dict[str, Any]:  # fmt: skip
    env = ctr.split_env(spec.env, settings)
    _, workspace_mounts = split_package_mount(spec.mounts)
    planned = plan_volumes(workspace_mounts, settings, spec.cwd)
    tmp_mounted = any(m.target == TMP_TARGET for m in workspace_mounts)
    volumes, mounts = _special_volumes(meta, package, bool(spec.stdin), tmp_mounted)
    worker = _container(spec, settings, env, meta, options)
    worker["volumeMounts"] = mounts + planned.volume_mounts
    if planned.working_dir is not None:
        worker["workingDir"] = planned.working_dir
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": settings.termination_grace_seconds,
        "securityContext": ctr.pod_security_context(settings),
        "containers": [worker],
        "volumes": volumes + planned.volumes,
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.node_selector:
        pod["nodeSelector"] = dict(settings.node_selector)
    if settings.volume_mode == "hostPath" and settings.node_name:
        pod["affinity"] = node_affinity(settings.node_name)
    return pod


def node_affinity(node: str) -> dict[str, Any]:
    """Only the node named ``node`` (by name, as a DaemonSet pins its pods): hostPath
    volumes are that node's folders. The scheduler still reports when it cannot fit."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}


def job_manifest(
    spec: LaunchSpec, settings: KubernetesSettings, package: PackageFiles | None, meta: _Meta,
    options: RunOptions,
) -> dict[str, Any]:  # fmt: skip
    job_spec: dict[str, Any] = {
        "suspend": True,
        "backoffLimit": 0,
        "template": {
            "metadata": {k: v for k, v in meta.render().items() if k != "name"},
            "spec": _pod_spec(spec, settings, package, meta, options),
        },
    }
    if spec.limits.timeout_seconds is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.limits.timeout_seconds))
    if settings.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta.render(), "spec": job_spec}


def config_map_manifest(meta: _Meta, package: PackageFiles) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta.render(), "immutable": True
    }
    if package.data:
        body["data"] = dict(package.data)
    if package.binary_data:
        body["binaryData"] = dict(package.binary_data)
    return body


def secret_manifest(meta: _Meta, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "metadata": meta.render(),
        "type": "Opaque", "immutable": True, "data": data,
    }


def network_policy_manifest(
    meta: _Meta, blocked: list[str] | None = None, job_api_url: str | None = None,
    dns: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Deny all ingress and egress of the run's pod (enforced where the CNI supports it);
    with ``blocked`` CIDRs (a run with network), allow egress anywhere but there, so the
    cloud metadata and credential addresses stay out of reach. An agent run given
    ``job_api_url`` may also reach the runyard server's pods on that port. A policy that
    allows any egress also allows ``dns`` (:func:`dns_egress`) by its own rule: Cilium and
    GKE Dataplane V2 never apply an ``ipBlock`` to a pod such as CoreDNS. A policy that
    allows none allows no DNS either (a name lookup carries data out too)."""
    selected = {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: meta.labels[RUN_ID_LABEL]}
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": selected}, "policyTypes": ["Ingress", "Egress"]
    }
    egress: list[dict[str, Any]] = []
    if blocked is not None:
        egress.append({"to": _allowed_blocks(blocked)})
    if job_api_url is not None:
        egress.append(_job_api_egress(job_api_url))
    if egress and dns is not None:
        egress.append(dns)
    if egress:
        spec["egress"] = egress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.render(),
        "spec": spec,
    }


def dns_egress(settings: KubernetesSettings) -> dict[str, Any]:
    """Port 53 (UDP and TCP) of the cluster DNS pods, by namespace and labels, and of the
    NodeLocal DNSCache addresses."""
    namespace = {"matchLabels": {"kubernetes.io/metadata.name": settings.dns_namespace}}
    pods = {"matchLabels": dict(settings.dns_pod_labels)}
    peers: list[dict[str, Any]] = [{"namespaceSelector": namespace, "podSelector": pods}]
    peers += [{"ipBlock": {"cidr": cidr}} for cidr in settings.dns_cidrs]
    ports = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    return {"to": peers, "ports": ports}


def _job_api_egress(url: str) -> dict[str, Any]:
    """The server's pods (the labels of ``runyard kubernetes manifests``) on the URL's port,
    which is the pod's own port there too."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    server = {"podSelector": {"matchLabels": dict(SERVER_LABELS)}}
    return {"to": [server], "ports": [{"protocol": "TCP", "port": port}]}


def _allowed_blocks(blocked: list[str]) -> list[dict[str, Any]]:
    blocks = []
    for everything in ("0.0.0.0/0", "::/0"):
        family = ":" in everything
        excepted = [cidr for cidr in blocked if (":" in cidr) == family]
        block: dict[str, Any] = {"cidr": everything}
        if excepted:
            block["except"] = excepted
        blocks.append({"ipBlock": block})
    return blocks


def build_manifests(
    spec: LaunchSpec, settings: KubernetesSettings, run_id: str, package: PackageFiles | None,
    options: RunOptions | None = None,
) -> RunManifests:  # fmt: skip
    """The Job (suspended) and its dependents for one run; ``package`` is already read."""
    meta = _metadata(spec, run_id, settings.instance)
    options = options or RunOptions()
    job = job_manifest(spec, settings, package, meta, options)
    job = with_gpus(job, settings, options.gpus, options.gpu_type)  # a template may add to it
    agent = AGENT_RUN_LABEL in spec.labels
    job = apply_templates(job, templates_for(settings, options.task, agent))
    dependents: list[dict[str, Any]] = []
    if package is not None:
        dependents.append(config_map_manifest(meta, package))
    secrets = ctr.split_env(spec.env, settings).secret
    if secrets or spec.stdin:
        dependents.append(secret_manifest(meta, ctr.secret_data(secrets, spec.stdin)))
    if settings.network_policy:
        blocked = settings.egress_blocked_cidrs if spec.network else None
        api = settings.job_api_url if AGENT_RUN_LABEL in spec.labels else None
        dns = dns_egress(settings)
        dependents.append(network_policy_manifest(meta, blocked, api, dns))
    return RunManifests(run_id, meta.name, job, dependents)


def owner_reference(job_name: str, job_uid: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid}


def owned_by(manifest: dict[str, Any], job_name: str, job_uid: str) -> dict[str, Any]:
    """A copy of ``manifest`` that Kubernetes' garbage collector deletes with the Job."""
    owned = copy.deepcopy(manifest)
    owned["metadata"]["ownerReferences"] = [owner_reference(job_name, job_uid)]
    return owned


CONTENT_FIELDS = ("data", "binaryData", "spec", "type")


def is_this_runs(existing: dict[str, Any], wanted: dict[str, Any], job_uid: str) -> bool:
    """Whether ``existing`` is the object ``wanted`` (created for the Job ``job_uid``)
    stands for: owned by that Job, or of the same run and instance and the same content."""
    meta = existing.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    if any(owner.get("uid") == job_uid and owner.get("kind") == "Job" for owner in owners):
        return True
    labels = meta.get("labels") or {}
    ours = {key: wanted["metadata"]["labels"].get(key) for key in (RUN_ID_LABEL, INSTANCE_LABEL)}
    if any(labels.get(key) != value for key, value in ours.items()):
        return False
    return all(existing.get(key) == wanted.get(key) for key in CONTENT_FIELDS)
