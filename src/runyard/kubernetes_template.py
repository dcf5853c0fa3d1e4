"""A pod template: what an operator may change in the pods runyard builds, and what not.

Example (``runyard.yaml``)::

    kubernetes:
      pod_template:                          # every run's pod
        metadata: {annotations: {sidecar.istio.io/inject: "false"}}
        spec:
          runtimeClassName: gvisor
          priorityClassName: research
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
          containers:
            - name: worker                   # runyard's container, merged by name
              image: registry.example/train:2
              resources: {limits: {nvidia.com/gpu: 1}}
        job: {ttlSecondsAfterFinished: 600}
      task_pod_templates: {train: {...}}     # that definition's task runs, after pod_template
      agent_pod_template: {...}              # agent runs, after pod_template

``metadata`` goes onto the Job and its pod, ``spec`` is a partial PodSpec and ``job`` a few
JobSpec fields; they are merged onto what runyard builds by
:mod:`runyard.executors.kubernetes.template`. :func:`check_template` runs when the settings
load and refuses, naming the field, whatever would loosen runyard's hardening or replace
what carries the run (its command, its ``RUNYARD_*`` environment, its volumes). Pure data:
this module imports no Kubernetes client.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RUNYARD_CONTAINER = "worker"  # executors/kubernetes/names.py CONTAINER_NAME
# fields of runyard's own container that carry the run's payload
PAYLOAD_FIELDS = ("command", "args", "workingDir")
# paths runyard mounts in every pod that needs them (stdin, the agent package)
RESERVED_MOUNTS = ("/run/runyard", "/opt/agent/package")
# volume names runyard gives (executors/kubernetes/manifests.py, volumes.py)
RESERVED_VOLUMES = re.compile(r"^(tmp|agent-package|runyard-stdin|workspace|mount-[0-9]+)$")
RESERVED_LABEL = re.compile(r"^(runyard\.|[^/]*runyard\.dev/|app\.kubernetes\.io/managed-by$)")
JOB_FIELDS = ("activeDeadlineSeconds", "ttlSecondsAfterFinished")
OWNED_POD_FIELDS = {
    "restartPolicy": "runyard runs each pod once (restartPolicy Never)",
    "ephemeralContainers": "ephemeral containers are added to running pods, not templates",
}
IDENTITY_FIELDS = {"runAsUser": "run_as_user", "runAsGroup": "run_as_group", "fsGroup": "fs_group"}
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
# pod fields a template may not turn on, and why
REFUSED_TRUE = {
    **{key: "the host's namespaces are never shared with a run" for key in HOST_NAMESPACES},
    "shareProcessNamespace": "a sidecar would see the worker's processes and their "
    "environment, the run's token among it",
    "automountServiceAccountToken": "a run never gets the service account's API token",
}
# Pod Security "baseline": the SELinux types and the namespaced sysctls it allows
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)  # fmt: skip
# the field names the checks read: another spelling of one (``HostNetwork``) is refused, as
# an API server that matches names without case would take it for the checked field
CHECKED_NAMES = {
    name.lower(): name for name in (
        "securityContext", "privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem",
        "runAsUser", "runAsGroup", "fsGroup", "runAsNonRoot", "capabilities", "add", "drop",
        "seccompProfile", "appArmorProfile", "seLinuxOptions", "windowsOptions", "hostProcess",
        "procMount", "sysctls", "hostNetwork", "hostPID", "hostIPC", "hostUsers",
        "automountServiceAccountToken", "restartPolicy", "ephemeralContainers", "containers",
        "initContainers", "volumes", "hostPath", "projected", "sources", "serviceAccountToken",
        "command", "args", "workingDir", "env", "volumeMounts", "mountPath", "ports", "hostPort",
        "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "type",
        "name", "user", "role", "suspend", "backoffLimit", "template", "shareProcessNamespace",
    )
}  # fmt: skip
# lists merged entry by entry, by this key (as a strategic merge patch does)
KEYED_LISTS = {
    "containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
    "volumeMounts": "mountPath", "imagePullSecrets": "name", "ports": "containerPort",
    "hostAliases": "ip",
}  # fmt: skip


class TemplateMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class PodTemplate(BaseModel):
    """A partial Pod (``metadata``, ``spec``) and Job (``job``) merged onto a run's Job."""

    model_config = ConfigDict(extra="forbid")

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: dict[str, Any] = Field(default_factory=dict)
    job: dict[str, Any] = Field(default_factory=dict)


class Refused(ValueError):
    """A template field that would loosen the hardening (``field`` is its path)."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"pod template field {field}: {why}")


def check_template(template: PodTemplate, pinned: bool = False) -> None:
    """Raise :class:`Refused` for the first field runyard cannot accept; ``pinned``: pods
    are pinned to the server's node (hostPath mode), so their node affinity is runyard's."""
    _no_directives(template.spec, "spec")
    _no_directives(template.job, "job")
    for kind, values in (("labels", template.metadata.labels),
                         ("annotations", template.metadata.annotations)):  # fmt: skip
        for key in values:
            if RESERVED_LABEL.match(key):
                raise Refused(f"metadata.{kind}.{key}", "runyard's own keys mark its runs")
    for key in template.job:
        if key not in JOB_FIELDS:
            raise Refused(f"job.{key}", f"only {', '.join(JOB_FIELDS)} may be set on the Job")
    _check_pod(template.spec, pinned)


def _no_directives(node: Any, where: str) -> None:
    """``$patch``, ``$retainKeys``…: this merge applies none of them, so none is accepted;
    nor a null, which in a merge patch deletes what runyard set (``securityContext: null``
    would drop the pod's whole hardening)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if str(key).startswith("$"):
                raise Refused(f"{where}.{key}", "merge directives are not supported")
            if value is None:
                raise Refused(f"{where}.{key}", "null would delete runyard's value; leave it out")
            spelt = CHECKED_NAMES.get(str(key).lower(), key)
            if spelt != key:
                raise Refused(f"{where}.{key}", f"field names are case-sensitive: {spelt}")
            _no_directives(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _no_directives(value, f"{where}[{index}]")


def _check_pod(spec: dict[str, Any], pinned: bool) -> None:
    for key, why in OWNED_POD_FIELDS.items():
        if key in spec:
            raise Refused(f"spec.{key}", why)
    for key, why in REFUSED_TRUE.items():
        if spec.get(key) is True:
            raise Refused(f"spec.{key}", why)
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    if pinned and required in _mapping(_mapping(spec, "affinity", "spec"), "nodeAffinity",
                                       "spec.affinity"):  # fmt: skip
        raise Refused(f"spec.affinity.nodeAffinity.{required}",
                      "in hostPath mode runyard pins every pod to the server's node")  # fmt: skip
    _check_pod_security(_mapping(spec, "securityContext", "spec"))
    for key in KEYED_LISTS:
        if key in spec and key not in ("containers", "initContainers", "volumes"):
            _keyed(spec, key, "spec")
    for volume in _keyed(spec, "volumes", "spec"):
        _check_volume(volume)
    for key in ("containers", "initContainers"):
        for container in _keyed(spec, key, "spec"):
            _check_container(container, f"spec.{key}[{container['name']}]", key == "containers")


def _check_pod_security(context: dict[str, Any]) -> None:
    where = "spec.securityContext"
    for key in IDENTITY_FIELDS:
        if key in context:
            setting = IDENTITY_FIELDS[key]
            raise Refused(f"{where}.{key}", f"the pod's identity is kubernetes.{setting}")
    _check_common_security(context, where)
    for index, sysctl in enumerate(context.get("sysctls") or []):
        name = sysctl.get("name") if isinstance(sysctl, dict) else None
        if name not in SAFE_SYSCTLS:
            why = f"{name!r} is not one of the namespaced sysctls Pod Security allows"
            raise Refused(f"{where}.sysctls[{index}]", why)


def _check_common_security(context: dict[str, Any], where: str) -> None:
    """What a pod's and a container's securityContext share."""
    if context.get("runAsUser") == 0:
        raise Refused(f"{where}.runAsUser", "runs never run as root (uid 0)")
    if context.get("runAsNonRoot") is False:
        raise Refused(f"{where}.runAsNonRoot", "runs never run as root")
    for key in ("seccompProfile", "appArmorProfile"):
        if _mapping(context, key, where).get("type") == "Unconfined":
            raise Refused(f"{where}.{key}.type", "a run is never unconfined")
    selinux = _mapping(context, "seLinuxOptions", where)
    for key in ("user", "role"):
        if key in selinux:
            raise Refused(f"{where}.seLinuxOptions.{key}", "SELinux users and roles are not set")
    if "type" in selinux and selinux["type"] not in SELINUX_TYPES:
        raise Refused(f"{where}.seLinuxOptions.type", f"allowed: {', '.join(SELINUX_TYPES)}")
    if _mapping(context, "windowsOptions", where).get("hostProcess") is True:
        raise Refused(f"{where}.windowsOptions.hostProcess", "host processes are refused")


def _check_volume(volume: dict[str, Any]) -> None:
    where = f"spec.volumes[{volume['name']}]"
    if RESERVED_VOLUMES.match(volume["name"]):
        raise Refused(where, "runyard names its own volumes so; choose another name")
    if "hostPath" in volume:
        raise Refused(f"{where}.hostPath", "a template never mounts the node's folders")
    for index, source in enumerate(_mapping(volume, "projected", where).get("sources") or []):
        if isinstance(source, dict) and "serviceAccountToken" in source:
            raise Refused(f"{where}.projected.sources[{index}].serviceAccountToken",
                          "a run never gets a service account token")  # fmt: skip


def _check_container(container: dict[str, Any], where: str, main: bool) -> None:
    ours = container["name"] == RUNYARD_CONTAINER
    if ours and not main:
        raise Refused(where, f"{RUNYARD_CONTAINER!r} is runyard's container, not an init one")
    for key in PAYLOAD_FIELDS if ours else ():
        if key in container:
            raise Refused(f"{where}.{key}", "runyard's container carries the run's payload")
    for entry in _keyed(container, "env", where):
        if ours and entry["name"].startswith("RUNYARD_"):
            raise Refused(f"{where}.env[{entry['name']}]", "RUNYARD_* names carry the run")
    for mount in _keyed(container, "volumeMounts", where):
        path = str(mount["mountPath"]).rstrip("/")
        if any(path == r or path.startswith(r + "/") or r.startswith(path + "/")
               for r in RESERVED_MOUNTS):  # fmt: skip
            raise Refused(f"{where}.volumeMounts[{path}]", "runyard mounts the run's inputs there")
    for port in _keyed(container, "ports", where):
        if "hostPort" in port:
            raise Refused(f"{where}.ports[{port['containerPort']}].hostPort",
                          "a run never binds the node's ports")  # fmt: skip
    _check_container_security(_mapping(container, "securityContext", where),
                              f"{where}.securityContext")  # fmt: skip


def _check_container_security(context: dict[str, Any], where: str) -> None:
    _check_common_security(context, where)
    loosening = {"privileged": True, "allowPrivilegeEscalation": True,
                 "readOnlyRootFilesystem": False}  # fmt: skip
    for key, value in loosening.items():
        if key in context and context[key] is value:
            raise Refused(f"{where}.{key}", f"runyard sets {key} {str(not value).lower()}")
    if context.get("procMount", "Default") != "Default":
        raise Refused(f"{where}.procMount", "only the Default /proc mount")
    capabilities = _mapping(context, "capabilities", where)
    if capabilities.get("add"):
        raise Refused(f"{where}.capabilities.add", "runyard drops every capability")
    if "drop" in capabilities and "ALL" not in (capabilities["drop"] or []):
        raise Refused(f"{where}.capabilities.drop", "must keep ALL (runyard drops every one)")


def _mapping(node: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = node.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(f"{where}.{key}", f"must be a mapping, not {type(value).__name__}")
    return value


def _keyed(node: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """The entries of a list merged by :data:`KEYED_LISTS`'s key, each checked to have it."""
    value = node.get(key)
    if value is None:
        return []
    merge_key = KEYED_LISTS[key]
    if not isinstance(value, list):
        raise Refused(f"{where}.{key}", f"must be a list, not {type(value).__name__}")
    for index, entry in enumerate(value):
        if not isinstance(entry, dict) or not isinstance(entry.get(merge_key), str | int):
            why = f"each entry must be a mapping with {merge_key}"
            raise Refused(f"{where}.{key}[{index}]", why)
    return value
