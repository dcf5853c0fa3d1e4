"""A run's NetworkPolicy: every policy that allows egress reaches the cluster DNS by its own
rule (pods by namespace and label, which Cilium applies where it ignores an ipBlock, and
NodeLocal DNS's address); a run with network is kept from the metadata and credential
addresses only; a run without network gets no egress at all, DNS included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import utils as kv
from pydantic import ValidationError

from runyard.executors.base import LaunchSpec
from runyard.executors.kubernetes.manifests import build_manifests
from runyard.executors.kubernetes.names import AGENT_RUN_LABEL, RUN_ID_LABEL
from runyard.kubernetes_settings import KubernetesSettings

PORTS_53 = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


def k8s(**overrides: Any) -> KubernetesSettings:
    return KubernetesSettings(image="registry.example/runyard:1", node_name="n", **overrides)


def policy(settings: KubernetesSettings, **spec: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"argv": ["true"], "log_path": Path("/var/log/run.log"),
                              "labels": {RUN_ID_LABEL: "run-1"}}  # fmt: skip
    made = build_manifests(LaunchSpec(**{**values, **spec}), settings, "run-1", None)
    found = [d for d in made.dependents if d["kind"] == "NetworkPolicy"]
    assert len(found) == 1
    return found[0]


def test_a_run_with_network_reaches_dns_by_its_own_rule_and_not_the_metadata() -> None:
    made = policy(k8s(), network=True)
    world, dns = made["spec"]["egress"]
    assert dns == {"to": [KUBE_DNS, {"ipBlock": {"cidr": "169.254.20.10/32"}}], "ports": PORTS_53}
    blocked = [cidr for peer in world["to"] for cidr in peer["ipBlock"]["except"]]
    assert "169.254.169.254/32" in blocked and "fd00:ec2::254/128" in blocked
    assert not any(cidr.startswith("169.254.0.0") for cidr in blocked)  # not all link-local
    for version in ("1.25.0", "1.37.0"):
        kv.validate(made, version, strict=True)


def test_an_agent_run_reaching_the_api_gets_the_dns_rule_too() -> None:
    settings = k8s(job_api_url="http://runyard.lab.svc:8765")
    made = policy(settings, network=False, labels={AGENT_RUN_LABEL: "run-1"})
    server, dns = made["spec"]["egress"]
    assert server["ports"] == [{"protocol": "TCP", "port": 8765}]
    assert dns["to"][0] == KUBE_DNS and dns["ports"] == PORTS_53


def test_a_run_without_network_gets_no_egress_not_even_dns() -> None:
    made = policy(k8s(), network=False)
    assert "egress" not in made["spec"] and "Egress" in made["spec"]["policyTypes"]


def test_the_dns_peers_and_blocked_addresses_are_settings() -> None:
    settings = k8s(
        dns_namespace="openshift-dns", dns_pod_labels={"dns.operator.openshift.io/daemonset-dns": "default"},
        dns_cidrs=[], egress_blocked_cidrs=["169.254.169.254/32"],
    )  # fmt: skip
    world, dns = policy(settings, network=True)["spec"]["egress"]
    assert dns["to"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "openshift-dns"}},
        "podSelector": {"matchLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}},
    }]  # fmt: skip
    assert world["to"][0]["ipBlock"]["except"] == ["169.254.169.254/32"]
    assert "except" not in world["to"][1]["ipBlock"]


@pytest.mark.parametrize("field", ["egress_blocked_cidrs", "dns_cidrs"])
@pytest.mark.parametrize("cidr", ["169.254.169.254/33", "metadata", "10.0.0.1/8", ""])
def test_a_cidr_that_is_not_one_is_refused_at_load(field: str, cidr: str) -> None:
    with pytest.raises(ValidationError, match="is not a CIDR"):
        k8s(**{field: [cidr]})
