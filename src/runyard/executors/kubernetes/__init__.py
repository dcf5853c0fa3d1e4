"""Run workers as Kubernetes Jobs (optional extra ``runyard[kubernetes]``).

Importing this package does not import the ``kubernetes`` client; creating a
:class:`KubernetesExecutor` does, and says which extra to install when it is missing.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["KubernetesExecutor", "KubernetesExitInfo", "KubernetesSettings", "sweep_leftovers"]

_WHERE = {
    "KubernetesExecutor": "runyard.executors.kubernetes.executor",
    "KubernetesExitInfo": "runyard.executors.kubernetes.status",
    "KubernetesSettings": "runyard.kubernetes_settings",
    "sweep_leftovers": "runyard.executors.kubernetes.sweeper",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
