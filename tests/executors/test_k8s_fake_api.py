"""The fake API server behaves as the tests built on it assume: uids and growing
resourceVersions, and deletion by propagation policy with a garbage collector that takes
``gc_delay`` seconds (so a test can see a Job being deleted in the foreground)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from k8s_fake_api import FakeKubernetes

JOBS = "/apis/batch/v1/namespaces/default/jobs"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


def make_job(client: httpx.Client, name: str) -> dict[str, Any]:
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"metadata": {}, "spec": {"containers": [{"image": "x"}]}}}}
    job = client.post(JOBS, json=body).json()
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"]}
    client.post(CONFIGMAPS, json={"metadata": {"name": name, "ownerReferences": [owner]}})
    return job  # type: ignore[no-any-return]


def kinds(fake: FakeKubernetes, name: str) -> set[str]:
    return {kind for kind in fake.kinds_named(name)} | (
        {"Pod"} if any(k == "Pod" and n.startswith(name) for k, _, n in fake.objects) else set()
    )


def eventually(check: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_objects_have_uids_and_growing_resource_versions(fake: FakeKubernetes) -> None:
    with httpx.Client(base_url=fake.url) as client:
        first, second = make_job(client, "a"), make_job(client, "b")
        assert first["metadata"]["uid"] != second["metadata"]["uid"]
        before = int(client.get(f"{JOBS}/a").json()["metadata"]["resourceVersion"])
        patched = client.patch(f"{JOBS}/a", json={"metadata": {"labels": {"x": "1"}}},
                               headers={"content-type": "application/merge-patch+json"})  # fmt: skip
        assert int(patched.json()["metadata"]["resourceVersion"]) > before
        assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def test_deletion_follows_the_propagation_policy_and_the_gc_takes_time(
    fake: FakeKubernetes,
) -> None:
    fake.gc_delay = 0.3
    with httpx.Client(base_url=fake.url) as client:
        for name in ("fg", "bg", "orphan"):
            make_job(client, name)
        fake.gc_gate.clear()  # what lingers is checked before the collector may run
        client.delete(f"{JOBS}/fg", params={"propagationPolicy": "Foreground"})
        marked = client.get(f"{JOBS}/fg").json()["metadata"]  # still there, being deleted
        assert marked["finalizers"] == ["foregroundDeletion"] and marked["deletionTimestamp"]
        assert "Pod" in kinds(fake, "fg") and "ConfigMap" in kinds(fake, "fg")
        fake.gc_gate.set()
        eventually(lambda: kinds(fake, "fg") == set())

        fake.gc_gate.clear()
        client.delete(f"{JOBS}/bg", params={"propagationPolicy": "Background"})
        assert client.get(f"{JOBS}/bg").status_code == 404  # gone at once,
        assert "ConfigMap" in kinds(fake, "bg")  # its dependents a little later
        fake.gc_gate.set()
        eventually(lambda: kinds(fake, "bg") == set())

        client.delete(f"{JOBS}/orphan", params={"propagationPolicy": "Orphan"})
        time.sleep(0.5)
        assert kinds(fake, "orphan") == {"ConfigMap", "Pod"}
