"""Pod templates merged onto a run's Job (the templates themselves: kubernetes_template.py).

    job = apply_templates(job, templates_for(settings, task="train", agent=False))

The merge is a strategic merge patch's, without directives: mappings merge key by key,
the lists of :data:`~runyard.kubernetes_template.KEYED_LISTS` merge entry by entry by
their key (containers and volumes by name, volumeMounts by mountPath, ...), tolerations and
topology spread constraints are added, any other list or value replaces runyard's. A
template's entry may not replace one runyard made for the run (a volume, a mount, an
environment name): that is an ExecutorError naming it. Every container of the result,
sidecars included, gets runyard's container hardening under its own settings, which the
settings check already kept from loosening it.
"""

from __future__ import annotations

import copy
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.kubernetes import container as ctr
from runyard.executors.kubernetes.names import CONTAINER_NAME
from runyard.kubernetes_settings import KubernetesSettings
from runyard.kubernetes_template import KEYED_LISTS, PodTemplate

ADDED_LISTS = ("tolerations", "topologySpreadConstraints")
HOST_FIELDS = ("hostNetwork", "hostPID", "hostIPC")
SECCOMP_KEPT = ("RuntimeDefault", "Localhost")


def templates_for(settings: KubernetesSettings, task: str | None, agent: bool) -> list[PodTemplate]:
    """The templates of one run, in the order they apply: every run's, then its own."""
    chosen = [settings.pod_template]
    chosen.append(settings.agent_pod_template if agent else None)
    chosen.append(settings.task_pod_templates.get(task) if task is not None else None)
    return [template for template in chosen if template is not None]


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """``patch`` merged onto ``base`` (neither is changed)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for name, value in patch.items():
            merged[name] = merge(base[name], value, name) if name in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list):
        if key in KEYED_LISTS:
            return _merge_keyed(base, patch, KEYED_LISTS[key])
        if key in ADDED_LISTS:
            return base + [copy.deepcopy(entry) for entry in patch if entry not in base]
    return copy.deepcopy(patch)


def _merge_keyed(base: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = list(base)
    where = {entry.get(merge_key): index for index, entry in enumerate(merged)}
    for entry in patch:
        index = where.get(entry[merge_key])
        if index is None:
            where[entry[merge_key]] = len(merged)
            merged.append(copy.deepcopy(entry))
        else:
            merged[index] = merge(merged[index], entry)
    return merged


def apply_templates(job: dict[str, Any], templates: list[PodTemplate]) -> dict[str, Any]:
    """``job`` with ``templates`` merged on, each checked against what runyard built."""
    if not templates:
        return job
    pod_spec = job["spec"]["template"]["spec"]
    for template in templates:
        _refuse_collisions(pod_spec, template.spec)
    merged = copy.deepcopy(job)
    for template in templates:
        meta = template.metadata.model_dump(exclude_defaults=True)
        merged["metadata"] = merge(merged["metadata"], meta)
        merged["spec"]["template"]["metadata"] = merge(merged["spec"]["template"]["metadata"], meta)
        merged["spec"] = merge(merged["spec"], template.job)
        merged["spec"]["template"]["spec"] = merge(merged["spec"]["template"]["spec"],
                                                   template.spec)  # fmt: skip
    _harden(merged["spec"]["template"]["spec"])
    verify_hardened(merged, job)
    return merged


def verify_hardened(merged: dict[str, Any], built: dict[str, Any]) -> None:
    """The last line behind the settings check (a template made without it, a field it
    does not know): what runyard set is still set in ``merged``, or an ExecutorError."""
    pod, ours = merged["spec"]["template"]["spec"], built["spec"]["template"]["spec"]
    kept = {f"spec.{key}": (pod.get(key), ours.get(key)) for key in (
        "automountServiceAccountToken", "restartPolicy")}  # fmt: skip
    kept |= {f"spec.{key}": (pod.get(key) or False, False) for key in HOST_FIELDS}
    context = pod.get("securityContext") or {}
    for field, value in ours["securityContext"].items():
        if field != "seccompProfile":  # RuntimeDefault, or the Localhost profile given
            kept[f"spec.securityContext.{field}"] = (context.get(field), value)
    seccomp = (context.get("seccompProfile") or {}).get("type")
    kept["spec.securityContext.seccompProfile"] = (seccomp in SECCOMP_KEPT, True)
    kept["job.backoffLimit"] = (merged["spec"].get("backoffLimit"), built["spec"]["backoffLimit"])
    hardening = ctr.container_security_context()
    for key in ("containers", "initContainers"):
        for container in pod.get(key) or []:
            context = container.get("securityContext") or {}
            for field, value in hardening.items():
                where = f"spec.{key}[{container.get('name')}].securityContext.{field}"
                kept[where] = (context.get(field), value)
    worse = [where for where, (now, was) in kept.items() if not _as_strict(now, was)]
    if worse:
        raise ExecutorError(
            f"The pod template would loosen runyard's hardening: {', '.join(worse)}"
        )


def _as_strict(now: Any, was: Any) -> bool:
    """``now`` keeps ``was``: equal, or a mapping that keeps each of its entries (the pod's
    securityContext may gain fields, a ``drop`` list may gain capabilities)."""
    if isinstance(was, dict) and isinstance(now, dict):
        return all(_as_strict(now.get(key), value) for key, value in was.items())
    if isinstance(was, list) and isinstance(now, list):
        return all(entry in now for entry in was)
    return bool(now == was and type(now) is type(was))


def _harden(pod_spec: dict[str, Any]) -> None:
    base = ctr.container_security_context()
    for key in ("containers", "initContainers"):
        for container in pod_spec.get(key) or []:
            container["securityContext"] = merge(base, container.get("securityContext") or {})


def _refuse_collisions(pod_spec: dict[str, Any], template: dict[str, Any]) -> None:
    ours = {volume["name"] for volume in pod_spec.get("volumes") or []}
    for volume in template.get("volumes") or []:
        if volume["name"] in ours:
            raise ExecutorError(
                f"The pod template's volume {volume['name']!r} would replace one runyard "
                "mounts for the run; give it another name"
            )
    worker = next(c for c in pod_spec["containers"] if c["name"] == CONTAINER_NAME)
    wanted: dict[str, Any] = next((c for c in template.get("containers") or []
                   if c["name"] == CONTAINER_NAME), {})  # fmt: skip
    env = {entry["name"] for entry in worker.get("env") or []}
    for entry in wanted.get("env") or []:
        if entry["name"] in env:
            raise ExecutorError(
                f"The pod template's environment entry {entry['name']!r} would replace the "
                "run's own (worker_env, its secrets or runyard's); set it there instead"
            )
    paths = [str(mount["mountPath"]).rstrip("/") for mount in worker.get("volumeMounts") or []]
    for mount in wanted.get("volumeMounts") or []:
        path = str(mount["mountPath"]).rstrip("/")
        clash = next((p for p in paths if _nested(p, path)), None)
        if clash is not None:
            raise ExecutorError(
                f"The pod template's volumeMount at {path} overlaps runyard's mount at "
                f"{clash}, which the run needs; mount it elsewhere"
            )


def _nested(one: str, other: str) -> bool:
    return one == other or one.startswith(other + "/") or other.startswith(one + "/")
