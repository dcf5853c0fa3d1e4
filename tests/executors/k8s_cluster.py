"""What end-to-end tests on the fake cluster share: a kubeconfig for the fake API server,
a bounded wait, and the test kubelet's container of a run.

    config = write_kubeconfig(fake, tmp_path / "kubeconfig")
    container = container_of(kubelet, run_id)     # waits until the kubelet runs its pod
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from k8s_fake_api import FakeKubernetes
from k8s_kubelet import Container, Kubelet


def write_kubeconfig(fake: FakeKubernetes, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }))  # fmt: skip
    return path


def wait_for(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """``check()``'s first true answer, polled every 50 ms; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def runs_in(container: Container, run_id: str) -> bool:
    """Whether ``container`` is the pod of run ``run_id`` (its Job is named after it)."""
    return bool(container.job and run_id.lower()[:20] in container.job)


def container_of(kubelet: Kubelet, run_id: str) -> Container:
    def find() -> Container | None:
        return next((c for c in list(kubelet.containers.values()) if runs_in(c, run_id)), None)

    return wait_for(find)  # type: ignore[no-any-return]
