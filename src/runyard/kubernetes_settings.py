"""The Kubernetes executor's settings: the ``kubernetes:`` block of ``runyard.yaml``.

Example::

    agent_executor: kubernetes
    kubernetes:
      namespace: runyard
      image: ghcr.io/example/agent-runtime:1.4
      volume_mode: pvc
      pvc_name: runyard-data
      pvc_host_root: /srv/runyard      # where that claim is mounted on the runyard host
      run_as_user: 1000
      run_as_group: 1000

Environment variables reach it through the nested delimiter, e.g.
``RUNYARD_KUBERNETES__IMAGE=...``. This module does not import the ``kubernetes`` client.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runyard.kubernetes_template import PodTemplate, Refused, check_template

DEFAULT_SECRET_ENV = (
    "RUNYARD_TOKEN",
    "*_TOKEN",
    "*_SECRET",
    "*_SECRET_KEY",
    "*_PASSWORD",
    "*_API_KEY",
    "*_CREDENTIALS",
)
K8S_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
LABEL_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# the cloud metadata and credential endpoints, not all of 169.254.0.0/16 (NodeLocal DNS is
# 169.254.20.10): AWS/GCP/Azure/OpenStack metadata (GCE's metadata.google.internal is
# 169.254.169.254 too), its IPv6 address on EC2, ECS task credentials, EKS Pod Identity
METADATA_CIDRS = (
    "169.254.169.254/32",
    "fd00:ec2::254/128",
    "169.254.170.2/32",
    "169.254.170.23/32",
    "fd00:ec2::23/128",
)
HTTP_ORIGIN = r"^https?://[^/?#@\s]+$"  # scheme, host and port: no path, no credentials
# an extended resource (domain/name, the domain required) and a label key (domain optional)
_DOMAIN = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
EXTENDED_RESOURCE = rf"^{_DOMAIN}/{_NAME}$"
LABEL_KEY = rf"^({_DOMAIN}/)?{_NAME}$"


class ResourceAmounts(BaseModel):
    """CPU and memory as Kubernetes quantities (``250m``, ``512Mi``); None leaves it unset."""

    model_config = ConfigDict(extra="forbid")

    cpu: str | None = Field(None, pattern=QUANTITY)
    memory: str | None = Field(None, pattern=QUANTITY)


class ResourceSettings(BaseModel):
    """Requests and limits of every run's container (``agent_limits`` override the limits)."""

    model_config = ConfigDict(extra="forbid")

    requests: ResourceAmounts = Field(
        default_factory=lambda: ResourceAmounts(cpu="250m", memory="512Mi")
    )
    limits: ResourceAmounts = Field(
        default_factory=lambda: ResourceAmounts(cpu=None, memory="2Gi")
    )


class KubernetesSettings(BaseModel):
    """How runs become Jobs. Every field is documented in ``docs/kubernetes.md``."""

    model_config = ConfigDict(extra="forbid")

    # where and how to reach the cluster
    namespace: str = Field("default", pattern=K8S_NAME)
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool | None = None
    request_timeout_seconds: float = Field(30.0, gt=0)

    # what runs
    image: str = Field(min_length=1)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    # a run's resources.gpus becomes this limit, its gpu_type a node selector on this label
    gpu_resource: str = Field("nvidia.com/gpu", pattern=EXTENDED_RESOURCE)
    gpu_type_label: str = Field("nvidia.com/gpu.product", pattern=LABEL_KEY)
    node_name: str | None = None
    resources: ResourceSettings = Field(default_factory=ResourceSettings)
    package_dir: Path | None = None
    # task runs: the image's Python (it runs ``-m runyard.runtime.worker``), per-task-
    # definition resources (replacing ``resources``), Jobs at once, how often a running
    # task's records are read (writes on other nodes raise no inotify event here)
    python: str = Field("python", min_length=1)
    task_resources: dict[str, ResourceSettings] = Field(default_factory=dict)
    max_concurrent_tasks: int = Field(256, ge=1, le=100_000)
    task_deadline_seconds: float | None = Field(None, gt=0)  # a task Job's activeDeadline
    record_poll_seconds: float = Field(0.5, gt=0)
    stdin_shell: str | None = "/bin/sh"

    # lifetime
    ttl_seconds_after_finished: int | None = Field(86400, ge=0)
    start_timeout_seconds: float = Field(300.0, gt=0)
    termination_grace_seconds: int = Field(30, ge=0)
    propagation_policy: Literal["Foreground", "Background"] = "Foreground"
    image_pull_grace_seconds: float = Field(60.0, ge=0)

    # files and identity
    volume_mode: Literal["hostPath", "pvc"] = "hostPath"
    pvc_name: str | None = None
    pvc_host_root: Path | None = None
    run_as_user: int = Field(1000, ge=0)
    run_as_group: int = Field(1000, ge=0)
    fs_group: int | None = Field(None, ge=0)
    # how an agent run's pod reaches the Task Job API over TCP (the Service in front of
    # runyard); needed with volume_mode 'pvc': a pod on another node has no way to the
    # server's Unix socket. Unset: the socket, which hostPath pods share with the server
    job_api_url: str | None = Field(None, pattern=HTTP_ORIGIN)

    # environment and network
    secret_env: list[str] = Field(default_factory=lambda: list(DEFAULT_SECRET_ENV))
    host_env: list[str] = Field(default_factory=list)
    network_policy: bool = True
    egress_blocked_cidrs: list[str] = Field(default_factory=lambda: list(METADATA_CIDRS))
    # the cluster DNS every policy that allows egress lets a run reach: pods labelled
    # k8s-app=kube-dns in kube-system (CoreDNS and kube-dns alike) and NodeLocal DNSCache
    dns_pod_labels: dict[str, str] = Field(default_factory=lambda: {"k8s-app": "kube-dns"})
    dns_namespace: str = Field("kube-system", pattern=K8S_NAME)
    dns_cidrs: list[str] = Field(default_factory=lambda: ["169.254.20.10/32"])

    # what an operator changes in the pods (kubernetes_template.py): every run's, then a
    # task definition's or agent runs'
    pod_template: PodTemplate | None = None
    task_pod_templates: dict[str, PodTemplate] = Field(default_factory=dict)
    agent_pod_template: PodTemplate | None = None

    # retries of the API server's transient failures (429, 5xx, connection errors)
    retry_attempts: int = Field(5, ge=0)
    retry_base_seconds: float = Field(0.5, gt=0)
    retry_max_seconds: float = Field(30.0, ge=0)

    # leftovers
    instance: str | None = Field(None, pattern=LABEL_VALUE)
    sweep_interval_seconds: float = Field(600.0, gt=0)
    sweep_min_age_seconds: float = Field(300.0, ge=0)

    # log copying
    log_retry_seconds: float = Field(1.0, gt=0)
    log_idle_timeout_seconds: float = Field(600.0, gt=0)
    log_drain_seconds: float = Field(10.0, ge=0)

    @field_validator("egress_blocked_cidrs", "dns_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR (such as 169.254.169.254/32)") from exc
        return value

    @model_validator(mode="after")
    def _templates_keep_hardening(self) -> KubernetesSettings:
        pinned = self.volume_mode == "hostPath"
        named = [("pod_template", self.pod_template)]
        named.append(("agent_pod_template", self.agent_pod_template))
        named += [(f"task_pod_templates.{task}", t) for task, t in self.task_pod_templates.items()]
        for where, template in named:
            try:
                if template is not None:
                    check_template(template, pinned)
            except Refused as exc:
                raise ValueError(f"kubernetes.{where}: {exc}") from exc
        return self

    @model_validator(mode="after")
    def _consistent(self) -> KubernetesSettings:
        if self.volume_mode == "pvc" and (self.pvc_name is None or self.pvc_host_root is None):
            raise ValueError(
                "volume_mode 'pvc' needs pvc_name (the claim) and pvc_host_root (the folder "
                "where that claim's root is mounted on the runyard host)"
            )
        if self.pvc_host_root is not None and not self.pvc_host_root.is_absolute():
            raise ValueError(f"pvc_host_root must be an absolute path, not {self.pvc_host_root}")
        if self.in_cluster and (self.kubeconfig is not None or self.context is not None):
            raise ValueError("in_cluster: true cannot be combined with kubeconfig or context")
        return self

    @property
    def effective_fs_group(self) -> int:
        return self.run_as_group if self.fs_group is None else self.fs_group
