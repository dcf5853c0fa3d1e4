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
from runyard.executors.kubernetes.names import STDIN_ENV, STDIN_KEY, STDIN_PATH
from runyard.executors.kubernetes.package import OBJECT_LIMIT
from runyard.kubernetes_settings import KubernetesSettings

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


def command(argv: list[str], stdin: bool, settings: KubernetesSettings) -> list[str]:
    """``argv``, wrapped by a shell that feeds the stdin file when there is stdin to give."""
    if not argv:
        raise ExecutorError("Nothing to launch: argv is empty")
    escaped = [escape_expansion(arg) for arg in argv]
    if not stdin or settings.stdin_shell is None:
        return escaped
    return [settings.stdin_shell, "-c", f'exec "$@" < {STDIN_PATH}', "runyard-worker", *escaped]


def resources(limits: Limits) -> dict[str, Any]:
    caps: dict[str, str] = {}
    if limits.cpu is not None:
        caps["cpu"] = f"{max(1, math.ceil(limits.cpu * 1000))}m"
    if limits.memory_bytes is not None:
        caps["memory"] = str(limits.memory_bytes)
    return {"limits": caps} if caps else {}


def pod_security_context(settings: KubernetesSettings) -> dict[str, Any]:
    return {
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "fsGroup": settings.effective_fs_group,
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
