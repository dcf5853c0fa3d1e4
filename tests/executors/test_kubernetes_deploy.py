"""``runyard kubernetes manifests``: the YAML validates strictly against a current and an
older Kubernetes minor, the Role grants exactly the calls the executor makes (replayed
against the fake API server through the real client), and the server's settings in the
Deployment are settings runyard accepts."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from k8s_fake_api import FakeKubernetes, Request
from kubernetes.client import ApiClient, Configuration

from runyard.config import Settings
from runyard.executors.base import LaunchSpec, Mount
from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings
from runyard.executors.kubernetes.deployment import (
    EXECUTOR_RULES,
    DeployOptions,
    deployment_manifests,
    server_env,
)
from runyard.executors.kubernetes.names import RUN_ID_LABEL

NODE = {"kubernetes.io/hostname": "node-1"}  # hostPath mode: pods pinned to our node
VERSIONS = ("1.37.0", "1.33.0")  # the validator's current minor and an older supported one
KINDS = ["Namespace", "ServiceAccount", "Role", "RoleBinding", "PersistentVolumeClaim",
         "Deployment", "Service"]  # fmt: skip


def print_manifests(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "kubernetes", "manifests", *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def validate_all(documents: list[dict[str, Any]]) -> None:
    for version in VERSIONS:
        for document in documents:
            kubernetes_validate.validate(document, version, strict=True)


def test_manifests_print_every_object_and_validate_strictly() -> None:
    documents = print_manifests(
        "--namespace", "research", "--image", "registry.example/runyard:2",
        "--storage-class", "nfs-client", "--size", "50Gi",
    )  # fmt: skip
    assert [doc["kind"] for doc in documents] == KINDS
    assert all(doc["metadata"].get("namespace", "research") == "research" for doc in documents)
    validate_all(documents)
    claim = documents[4]["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"] and claim["storageClassName"] == "nfs-client"
    assert claim["resources"]["requests"]["storage"] == "50Gi"
    pod = documents[5]["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["args"][0] == "serve" and server["image"] == "registry.example/runyard:2"
    token = next(e for e in server["env"] if e["name"] == "RUNYARD_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "runyard-token", "key": "token"}
    assert "value" not in token
    mounts = {m["mountPath"] for m in server["volumeMounts"]}
    args = server["args"]
    for flag in ("--workspace-dir", "--log-dir"):
        assert any(args[args.index(flag) + 1].startswith(m + "/") for m in mounts)
    assert server["livenessProbe"]["httpGet"]["path"] == "/health"
    assert server["readinessProbe"]["httpGet"] == {"path": "/health?ready=1", "port": "http"}
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"]
    assert pod["serviceAccountName"] == documents[1]["metadata"]["name"]
    binding = documents[3]
    assert binding["roleRef"]["name"] == documents[2]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == documents[1]["metadata"]["name"]


def test_the_validator_rejects_a_misspelt_field() -> None:
    # the strict validation above is worth something only if it can say no
    deployment = deployment_manifests(DeployOptions())[5]
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    for version in VERSIONS:
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(deployment, version, strict=True)


def test_a_name_that_is_not_a_dns_label_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "kubernetes", "manifests", "--namespace", "Bad_NS"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "Bad_NS" in done.stderr and done.stdout == ""


def test_the_servers_environment_makes_settings_runyard_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in list(__import__("os").environ) if n.startswith("RUNYARD_")]:
        monkeypatch.delenv(name)
    options = DeployOptions(namespace="research", image="registry.example/runyard:2")
    for entry in server_env(options):
        if "value" in entry:
            monkeypatch.setenv(entry["name"], entry["value"])
    settings = Settings()
    assert settings.agent_executor == "kubernetes"
    k8s = settings.kubernetes
    assert k8s is not None and k8s.namespace == "research" and k8s.in_cluster is True
    assert k8s.volume_mode == "pvc" and k8s.pvc_name == "runyard-data"
    assert k8s.image == "registry.example/runyard:2"
    assert "runyard.research.svc" in settings.allowed_hosts


# --- the Role against the executor's real traffic ---------------------------------------
PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def permission(request: Request) -> tuple[str, str, str]:
    """What RBAC checks for one request: (API group, resource, verb)."""
    found = PATH.match(request.path)
    assert found is not None, request.path
    resource = found["resource"] + (f"/{found['sub']}" if found["sub"] else "")
    named = found["name"] is not None
    if request.method == "GET":
        verb = "get" if named else ("watch" if request.query.get("watch") else "list")
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update"}.get(request.method, "")
        if request.method == "DELETE":
            verb = "delete" if named else "deletecollection"
    return (found["group"] or "", resource, verb)


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


def replay_every_flow(fake: FakeKubernetes, tmp_path: Path) -> None:
    """Launch (package, stdin, no network), poll with the log, cancel, and sweep."""
    settings = KubernetesSettings(image="registry.example/runyard:2", log_retry_seconds=0.05,
                                  node_selector=NODE,
                                  request_timeout_seconds=5, log_drain_seconds=2,
                                  node_name="node-a", instance="ry-1")  # fmt: skip
    executor = KubernetesExecutor(settings, ApiClient(Configuration(host=fake.url)))
    package = tmp_path / "package"
    package.mkdir()
    (package / "main.py").write_text("print('hi')\n")
    (tmp_path / "run").mkdir()
    spec = LaunchSpec(
        argv=["python3", "/opt/agent/package/main.py"], log_path=tmp_path / "run.log",
        env={"RUNYARD_API_TOKEN": "t"}, stdin=b"{}", network=False,
        mounts=[Mount(tmp_path / "run", "/workspace"), Mount(package, "/opt/agent/package", True)],
        labels={RUN_ID_LABEL: "run-1"},
    )  # fmt: skip
    try:
        first = executor.launch(spec)
        assert executor.poll(first) is None
        fake.start_container("runyard-run-1")
        fake.write_log("runyard-run-1", b"hello\n")
        fake.terminate("runyard-run-1", 0)
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while executor.poll(first) is None:
            assert datetime.now(UTC) < deadline
        executor.cleanup(first)
        second = executor.launch(
            LaunchSpec(**{**spec.__dict__, "labels": {RUN_ID_LABEL: "run-2"}})
        )
        fake.gc_delay = 0.5  # as in a cluster: the pod outlives the Job's deletion a while
        executor.cancel(second, 1)
        fake.gc_delay = 0
        old = datetime.now(UTC) - timedelta(hours=1)
        for kind in ("Job", "ConfigMap", "Secret", "NetworkPolicy"):
            body: dict[str, Any] = {"metadata": {"name": "runyard-old", "labels": {
                "app.kubernetes.io/managed-by": "runyard", RUN_ID_LABEL: "old",
                "runyard.dev/instance": "ry-1"}}}
            if kind == "Job":
                body["spec"] = {"template": {"spec": {"containers": []}}}
            fake.add(kind, body, old)
        assert len(executor.sweep(active_run_ids=set(), min_age_seconds=300)) >= 4
    finally:
        executor.close()
    replay_a_start_timeout(fake, tmp_path, spec)


def replay_a_start_timeout(fake: FakeKubernetes, tmp_path: Path, spec: LaunchSpec) -> None:
    """A pod that never starts: its end names Kubernetes' reason, read from the events."""
    settings = KubernetesSettings(image="registry.example/runyard:2", request_timeout_seconds=5,
                                  start_timeout_seconds=0.2, log_retry_seconds=0.05,
                                  node_selector=NODE)  # fmt: skip
    executor = KubernetesExecutor(settings, ApiClient(Configuration(host=fake.url)))
    try:
        handle = executor.launch(LaunchSpec(**{**spec.__dict__, "labels": {RUN_ID_LABEL: "r3"}}))
        fake.set_unschedulable("runyard-r3", "0/3 nodes are available")
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while (info := executor.poll(handle)) is None:
            assert datetime.now(UTC) < deadline
        assert "Unschedulable" in info.describe()
    finally:
        executor.close()


def test_the_role_grants_exactly_what_the_executor_calls(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    replay_every_flow(fake, tmp_path)
    used = {permission(request) for request in fake.requests}
    granted = {(group, resource, verb) for group, resource, verbs in EXECUTOR_RULES
               for verb in verbs}  # fmt: skip
    assert used - granted == set(), "calls the Role does not allow"
    assert granted - used == set(), "rights the executor never uses"
    role = deployment_manifests(DeployOptions())[2]
    printed = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}  # fmt: skip
    assert printed == granted
