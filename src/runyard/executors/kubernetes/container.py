"""The worker container: command, environment split into plain and secret, security, limits."""

from __future__ import annotations

import base64
import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.base import Limits
from runyard.executors.kubernetes.names import LOG_FILE_ENV, STDIN_ENV, STDIN_KEY, STDIN_PATH
from runyard.executors.kubernetes.package import OBJECT_LIMIT
from runyard.kubernetes_settings import KubernetesSettings, ResourceSettings

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
SECRET_ENV_PREFIX = "env."


@dataclass(frozen=True)
class EnvSplit:
    plain: dict[str, str]
    secret: dict[str, str]


def escape_expansion(value: str) -> str:
    """Kubernetes expands ``$(NAME)`` in command, args and env values; ``$$(`` keeps it literal."""
    return value.replace("$(", "$$(")


def is_secret_name(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def split_env(env: dict[str, str], settings: KubernetesSettings) -> EnvSplit:
    """Drop host-only names; entries matching ``secret_env`` go to the Secret."""
    plain: dict[str, str] = {}
    secret: dict[str, str] = {}
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ExecutorError(
                f"Environment name {name!r} is not allowed in a pod: letters, digits, '_', "
                "'-' and '.', not starting with a digit"
            )
        if name in settings.host_env:
            continue
        target = secret if is_secret_name(name, settings.secret_env) else plain
        target[name] = value
    return EnvSplit(plain, secret)


def secret_data(secret_env: dict[str, str], stdin: bytes) -> dict[str, str]:
    """The Secret's base64 ``data``: ``env.<NAME>`` per secret variable, ``stdin``."""
    raw = {SECRET_ENV_PREFIX + name: value.encode() for name, value in secret_env.items()}
    if stdin:
        raw[STDIN_KEY] = stdin
    size = sum(len(value) for value in raw.values())
    if size > OBJECT_LIMIT:
        raise ExecutorError(
            f"stdin ({len(stdin)} bytes) and secret environment ({size - len(stdin)} bytes) "
            f"exceed the {OBJECT_LIMIT} bytes (1 MiB) a Secret holds; pass large inputs as "
            "files in a mounted folder"
        )
    return {key: base64.b64encode(value).decode("ascii") for key, value in raw.items()}


def env_entries(split: EnvSplit, secret_name: str, stdin: bool) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [
        {"name": name, "value": escape_expansion(value)}
        for name, value in sorted(split.plain.items())
    ]
    entries += [
        {
            "name": name,
            "valueFrom": {
                "secretKeyRef": {"name": secret_name, "key": SECRET_ENV_PREFIX + name}
            },
        }
        for name in sorted(split.secret)
    ]
    if stdin:
        entries.append({"name": STDIN_ENV, "value": STDIN_PATH})
    return entries


def command(
    argv: list[str], stdin: bool, settings: KubernetesSettings, log_in_pod: bool = False
) -> list[str]:
    """``argv``, wrapped by a shell that feeds the stdin file when there is stdin to give
    and, with ``log_in_pod``, appends the output to ``$RUNYARD_LOG_FILE`` (a file on the
    shared volume) instead of the pod log."""
    if not argv:
        raise ExecutorError("Nothing to launch: argv is empty")
    escaped = [escape_expansion(arg) for arg in argv]
    if settings.stdin_shell is None:
        if log_in_pod:
            raise ExecutorError(
                "A task run writes its log through a shell: kubernetes.stdin_shell is unset"
            )
        return escaped
    redirect = f" < {STDIN_PATH}" if stdin else ""
    if log_in_pod:
        redirect += f' >> "${LOG_FILE_ENV}" 2>&1'
    if not redirect:
        return escaped
    return [settings.stdin_shell, "-c", f'exec "$@"{redirect}', "runyard-worker", *escaped]


def resources(limits: Limits, configured: ResourceSettings) -> dict[str, Any]:
    """Requests and limits of the worker container.

    The run's own limits (``agent_limits``: memory and cpu) win over the configured
    ``kubernetes.resources.limits``: they are what the run was promised, as a local run's
    cgroup. A request above its limit is lowered to the limit (the API would refuse it).
    """
    caps = {k: v for k, v in configured.limits.model_dump().items() if v is not None}
    if limits.cpu is not None:
        caps["cpu"] = f"{max(1, math.ceil(limits.cpu * 1000))}m"
    if limits.memory_bytes is not None:
        caps["memory"] = str(limits.memory_bytes)
    wanted = {k: v for k, v in configured.requests.model_dump().items() if v is not None}
    requests = {
        k: caps[k] if k in caps and quantity(caps[k]) < quantity(v) else v
        for k, v in wanted.items()
    }
    return {"requests": requests, "limits": caps}


_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: str) -> float:
    """A Kubernetes quantity (``250m``, ``2Gi``, ``1.5``) as a number, to compare two."""
    found = _QUANTITY.match(value)
    if found is None or (found.group(2) and found.group(2) not in _SUFFIX):
        raise ExecutorError(f"{value!r} is not a Kubernetes quantity")
    return float(found.group(1)) * _SUFFIX.get(found.group(2), 1.0)


def pod_security_context(settings: KubernetesSettings) -> dict[str, Any]:
    return {
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "fsGroup": settings.effective_fs_group,
        "fsGroupChangePolicy": "OnRootMismatch",  # no recursive chown of big volumes
        "runAsNonRoot": settings.run_as_user != 0,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
