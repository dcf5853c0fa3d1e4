"""Mounts of a LaunchSpec as pod volumes: hostPath (one node) or a PVC with subPaths."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.base import Mount
from runyard.executors.kubernetes.names import PACKAGE_TARGET, RESERVED_TARGETS
from runyard.kubernetes_settings import KubernetesSettings

PVC_VOLUME = "workspace"


@dataclass(frozen=True)
class VolumePlan:
    volumes: list[dict[str, Any]]
    volume_mounts: list[dict[str, Any]]
    working_dir: str | None


def check_target(target: str) -> str:
    """An absolute, normalised container path that runyard does not reserve."""
    if not target.startswith("/") or posixpath.normpath(target) != target or target == "/":
        raise ExecutorError(
            f"Mount target {target!r} must be an absolute, normalised path other than '/' "
            "(no '..', '.', '//' or trailing '/')"
        )
    for reserved in (*RESERVED_TARGETS, PACKAGE_TARGET):
        if target == reserved or target.startswith(reserved + "/"):
            raise ExecutorError(f"Mount target {target!r} is reserved: {reserved} is runyard's")
    return target


def _sorted_checked(mounts: list[Mount]) -> list[Mount]:
    seen: set[str] = set()
    for mount in mounts:
        check_target(mount.target)
        if mount.target in seen:
            raise ExecutorError(f"Two mounts share the target {mount.target!r}")
        if not mount.host_path.is_absolute():
            raise ExecutorError(f"Mount host path {mount.host_path} must be absolute")
        seen.add(mount.target)
    return sorted(mounts, key=lambda m: (len(PurePosixPath(m.target).parts), m.target))


def _sub_path(host_path: Path, root: Path) -> str:
    host = posixpath.normpath(str(host_path))
    base = posixpath.normpath(str(root))
    if host == base:
        return ""
    if not host.startswith(base.rstrip("/") + "/"):
        raise ExecutorError(
            f"Mount {host_path} is outside pvc_host_root {root}; in 'pvc' volume mode every "
            "mounted folder must live on the claim"
        )
    return host[len(base.rstrip("/")) + 1 :]


def _host_path_volumes(mounts: list[Mount]) -> VolumePlan:
    volumes, volume_mounts = [], []
    for index, mount in enumerate(mounts):
        name = f"mount-{index}"
        kind = "File" if mount.host_path.is_file() else "Directory"  # the kubelet checks it
        volumes.append({"name": name, "hostPath": {"path": str(mount.host_path), "type": kind}})
        volume_mounts.append(
            {"name": name, "mountPath": mount.target, "readOnly": mount.read_only}
        )
    return VolumePlan(volumes, volume_mounts, None)


def _pvc_volumes(mounts: list[Mount], settings: KubernetesSettings) -> VolumePlan:
    assert settings.pvc_name is not None and settings.pvc_host_root is not None
    volume_mounts = []
    for mount in mounts:
        entry: dict[str, Any] = {
            "name": PVC_VOLUME, "mountPath": mount.target, "readOnly": mount.read_only
        }
        sub_path = _sub_path(mount.host_path, settings.pvc_host_root)
        if sub_path:
            entry["subPath"] = sub_path
        volume_mounts.append(entry)
    volumes = []
    if mounts:
        volumes.append(
            {"name": PVC_VOLUME, "persistentVolumeClaim": {"claimName": settings.pvc_name}}
        )
    return VolumePlan(volumes, volume_mounts, None)


def plan_volumes(
    mounts: list[Mount], settings: KubernetesSettings, cwd: Path | None
) -> VolumePlan:
    """Volumes and volumeMounts for ``mounts`` (the package mount excluded by the caller).

    ``cwd`` is a path inside the pod, as for the bubblewrap sandbox.
    """
    ordered = _sorted_checked(mounts)
    if settings.volume_mode == "pvc":
        plan = _pvc_volumes(ordered, settings)
    else:
        plan = _host_path_volumes(ordered)
    working_dir = None
    if cwd is not None:
        working_dir = cwd.as_posix()
        if not cwd.is_absolute() or posixpath.normpath(working_dir) != working_dir:
            raise ExecutorError(
                f"Working directory {cwd} must be an absolute, normalised path inside the pod"
            )
    return VolumePlan(plan.volumes, plan.volume_mounts, working_dir)
