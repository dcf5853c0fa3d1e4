"""The objects that deploy runyard itself on a cluster (``runyard kubernetes manifests``).

    docs = deployment_manifests(DeployOptions(namespace="runyard", image="registry/runyard:1"))

Namespace, ServiceAccount, the Role the executor needs and its RoleBinding, a
ReadWriteMany PVC for the workspace and logs, a Deployment running ``runyard serve`` and a
Service in front of it. The server's bearer token comes from a Secret the operator
creates (``token_secret``, key ``token``), so no token is ever printed. Pure data: nothing
here contacts a cluster or imports the ``kubernetes`` client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# What the executor asks of the API server, verb by verb (executors/kubernetes/api.py):
# create       KubeApi.create: the Job, then its ConfigMap, Secret and NetworkPolicy
# get          KubeApi.read_job (Jobs) and KubeApi.open_log (pods/log)
# patch        KubeApi.patch_job: resume the suspended Job
# list         KubeApi.list: pods of a run (poll, cancel), every kind in the sweeper, and
#              the events of a pod that did not start in time (its reason); and
#              KubeApi.list_with_version: the Jobs and pods a watch starts from
# watch        KubeApi.watch: this instance's Jobs and pods (executors/kubernetes/watch.py)
# delete       KubeApi.delete: cancel (Job, pod), a failed launch, the sweeper
# A test replays the executor's calls against the fake API server and checks that this
# table covers each of them and grants nothing they do not use.
EXECUTOR_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("batch", "jobs", ("create", "get", "list", "watch", "patch", "delete")),
    ("", "configmaps", ("create", "list", "delete")),
    ("", "secrets", ("create", "list", "delete")),
    ("", "pods", ("list", "watch", "delete")),
    ("", "pods/log", ("get",)),
    ("", "events", ("list",)),
    ("networking.k8s.io", "networkpolicies", ("create", "list", "delete")),
)
USER_ID = 1000  # the image's non-root user (deploy/Dockerfile)
DATA_PATH = "/data"  # where the claim is mounted in the server (and, in pvc mode, found)


@dataclass(frozen=True)
class DeployOptions:
    """What ``runyard kubernetes manifests`` lets the operator choose."""

    namespace: str = "runyard"
    image: str = "runyard:latest"
    storage_class: str | None = None
    size: str = "20Gi"
    name: str = "runyard"
    port: int = 8765
    token_secret: str = "runyard-token"


def role_rules() -> list[dict[str, Any]]:
    """:data:`EXECUTOR_RULES` as RBAC ``rules``."""
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
        for group, resource, verbs in EXECUTOR_RULES
    ]


def _meta(options: DeployOptions, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or options.name,
        "namespace": options.namespace,
        "labels": {"app.kubernetes.io/name": "runyard", "app.kubernetes.io/instance": options.name},
    }


def _access(options: DeployOptions) -> list[dict[str, Any]]:
    subject = {"kind": "ServiceAccount", "name": options.name, "namespace": options.namespace}
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": options.namespace, "labels": dict(PSA_LABELS)}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(options)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": _meta(options), "rules": role_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(options), "subjects": [subject],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": options.name}},
    ]  # fmt: skip


def _claim(options: DeployOptions) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],  # the server and every run pod mount it
        "resources": {"requests": {"storage": options.size}},
    }
    if options.storage_class is not None:
        spec["storageClassName"] = options.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": _meta(options, f"{options.name}-data"), "spec": spec}  # fmt: skip


def server_env(options: DeployOptions) -> list[dict[str, Any]]:
    """The settings of the server in the pod, as ``RUNYARD_*`` variables."""
    service = f"{options.name}.{options.namespace}.svc"
    plain = {
        "RUNYARD_AGENT_EXECUTOR": "kubernetes",
        "RUNYARD_KUBERNETES__IN_CLUSTER": "true",
        "RUNYARD_KUBERNETES__NAMESPACE": options.namespace,
        "RUNYARD_KUBERNETES__IMAGE": options.image,
        "RUNYARD_KUBERNETES__VOLUME_MODE": "pvc",
        "RUNYARD_KUBERNETES__PVC_NAME": f"{options.name}-data",
        "RUNYARD_KUBERNETES__PVC_HOST_ROOT": DATA_PATH,
        # run pods on any node reach the Task Job API through the Service below
        "RUNYARD_KUBERNETES__JOB_API_URL": f"http://{service}:{options.port}",
        "RUNYARD_KUBERNETES__RUN_AS_USER": str(USER_ID),
        "RUNYARD_KUBERNETES__RUN_AS_GROUP": str(USER_ID),
        # the Host header of in-cluster clients: the Service's names
        "RUNYARD_ALLOWED_HOSTS": json.dumps([options.name, service, f"{service}.cluster.local"]),
        "HOME": "/tmp",
    }
    token = {
        "name": "RUNYARD_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": options.token_secret, "key": "token"}},
    }
    return [{"name": key, "value": value} for key, value in plain.items()] + [token]


# /health answers from the port's first moment; /health?ready=1 answers 503 until the
# start-up (index, reconciling the runs) is over, so readiness needs no process forked
READY_PATH = "/health?ready=1"
# Pod Security Admission: the server's pod and, in pvc mode, every run pod meet "restricted"
PSA_LABELS = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")
} | {"pod-security.kubernetes.io/enforce-version": "latest"}


def _container(options: DeployOptions) -> dict[str, Any]:
    argv = ["serve", "--host", "0.0.0.0", "--port", str(options.port),
            "--workspace-dir", f"{DATA_PATH}/workspace",
            "--log-dir", f"{DATA_PATH}/logs"]  # fmt: skip
    return {
        "name": "runyard",
        "image": options.image,
        "args": argv,  # the image's entrypoint is ``runyard``
        "ports": [{"name": "http", "containerPort": options.port}],
        "env": server_env(options),
        "volumeMounts": [{"name": "data", "mountPath": DATA_PATH},
                         {"name": "tmp", "mountPath": "/tmp"}],
        # the port opens at once; a slow import or a cold volume gets up to 5 minutes
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                         "periodSeconds": 2, "timeoutSeconds": 5, "failureThreshold": 150},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"},
                          "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": READY_PATH, "port": "http"},
                           "periodSeconds": 10, "timeoutSeconds": 5},
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                      "limits": {"memory": "2Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
    }  # fmt: skip


def _deployment(options: DeployOptions) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": "runyard", "app.kubernetes.io/instance": options.name}
    pod = {
        "serviceAccountName": options.name,
        "enableServiceLinks": False,
        "securityContext": {"runAsUser": USER_ID, "runAsGroup": USER_ID, "fsGroup": USER_ID,
                            "runAsNonRoot": True, "fsGroupChangePolicy": "OnRootMismatch",
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_container(options)],
        "volumes": [{"name": "data",
                     "persistentVolumeClaim": {"claimName": f"{options.name}-data"}},
                    {"name": "tmp", "emptyDir": {}}],
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(options),
        "spec": {
            # one server per workspace: never two at once, not even during a rollout
            "replicas": 1, "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": pod},
        },
    }  # fmt: skip


def _service(options: DeployOptions) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": "runyard", "app.kubernetes.io/instance": options.name}
    port = {"name": "http", "port": options.port, "targetPort": "http", "protocol": "TCP"}
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(options),
            "spec": {"type": "ClusterIP", "selector": selector, "ports": [port]}}  # fmt: skip


def deployment_manifests(options: DeployOptions) -> list[dict[str, Any]]:
    """Every object, in the order ``kubectl apply`` should create them."""
    return [*_access(options), _claim(options), _deployment(options), _service(options)]


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order written (as ``kubectl`` users read them)."""
    import yaml

    return "".join(
        "---\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
        for doc in documents
    )
