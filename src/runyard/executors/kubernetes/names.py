"""Names, labels and fixed paths shared by the manifests, the executor and the sweeper."""

from __future__ import annotations

import hashlib
import re
import secrets

from runyard.errors import ExecutorError

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "runyard"
RUN_ID_LABEL = "runyard.dev/run-id"
INSTANCE_LABEL = "runyard.dev/instance"
CONTAINER_NAME = "worker"
PACKAGE_TARGET = "/opt/agent/package"
STDIN_DIR = "/run/runyard"
STDIN_KEY = "stdin"
STDIN_PATH = f"{STDIN_DIR}/{STDIN_KEY}"
STDIN_ENV = "RUNYARD_STDIN_FILE"
LOG_FILE_ENV = "RUNYARD_LOG_FILE"  # a task run's log on the shared volume
TMP_TARGET = "/tmp"
RESERVED_TARGETS = (STDIN_DIR,)
AGENT_RUN_LABEL = "runyard.agent-run"
# the runyard server's pods (deployment.py): where a run's NetworkPolicy lets it reach the API
SERVER_LABELS = (("app.kubernetes.io/name", "runyard"),)

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NAME_PREFIX = "runyard-"
_MAX_NAME = 63


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_NAME.match(value))


def check_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if name and is_label_value(name) and (not prefix or _DNS_SUBDOMAIN.match(prefix)):
        return key
    raise ExecutorError(
        f"Label key {key!r} is not a valid Kubernetes label key: an optional DNS-subdomain "
        "prefix and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending "
        "with a letter or digit"
    )


def run_id_of(labels: dict[str, str]) -> str:
    """The run id the caller put under ``runyard.dev/run-id`` (else under
    ``runyard.agent-run``, the agent-run backend's label), else a fresh one."""
    run_id = labels.get(RUN_ID_LABEL, labels.get(AGENT_RUN_LABEL))
    if run_id is None:
        return f"r{secrets.token_hex(6)}"
    if not run_id or not is_label_value(run_id):
        raise ExecutorError(
            f"Run id {run_id!r} is not a valid label value: 1-63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return run_id


def resource_name(run_id: str) -> str:
    """``runyard-<run-id>`` as a DNS label (<= 63 chars); altered ids get a hash suffix."""
    cleaned = _NOT_DNS.sub("-", run_id.lower()).strip("-")
    name = _NAME_PREFIX + cleaned
    if cleaned == run_id and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    head = name[: _MAX_NAME - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def split_labels(labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The caller's labels as (labels, annotations): values a label cannot hold become
    annotations under the same key, so nothing is lost or rewritten."""
    as_labels: dict[str, str] = {}
    as_annotations: dict[str, str] = {}
    for key, value in labels.items():
        check_label_key(key)
        if is_label_value(value):
            as_labels[key] = value
        else:
            as_annotations[key] = value
    return as_labels, as_annotations


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def managed_selector(run_id: str | None = None, instance: str | None = None) -> str:
    labels = {MANAGED_BY_LABEL: MANAGED_BY}
    if run_id is not None:
        labels[RUN_ID_LABEL] = run_id
    if instance is not None:
        labels[INSTANCE_LABEL] = instance
    return selector(labels)
