"""``runyard kubernetes job TASK key=value…``: the Job a submit would create on Kubernetes,
printed with the settings in force (config file and ``RUNYARD_KUBERNETES__*``), valid for
``kubectl apply -f -`` (strict schemas of two minors), with nothing written or contacted."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

VERSIONS = ("1.37.0", "1.33.0")
CONFIG = """\
kubernetes:
  image: registry.example/runyard:3
  node_name: node-a
  task_deadline_seconds: 7200
  task_resources:
    demo: {requests: {cpu: "2", memory: 1Gi}, limits: {memory: 4Gi}}
worker_env: {API_TOKEN: s3cret-value, MODE: fast}
task_limits: {cpu: 1.5}
"""


def run_job(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", "kubernetes", "job", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, env={**clean, **env},
    )  # fmt: skip


def documents(output: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(output) if doc is not None]


def test_the_job_of_a_submit_is_printed_valid_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text(CONFIG)
    before = sorted(tmp_path.rglob("*"))
    done = run_job(tmp_path, "demo", "x=1", "y=2", "--name", "nightly",
                   RUNYARD_KUBERNETES__NAMESPACE="research")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(tmp_path.rglob("*")) == before  # no workspace, no instance file, no log
    docs = documents(done.stdout)
    assert [doc["kind"] for doc in docs] == ["Job", "Secret", "NetworkPolicy"]
    for version in VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)
    job, secret, _ = docs
    assert job["metadata"]["annotations"]["runyard.dev/task-id"] == "base#demo#nightly"
    assert job["spec"]["suspend"] is False  # applied by hand, it runs
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    pod = job["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    assert worker["image"] == "registry.example/runyard:3"
    assert worker["command"][-3:] == ["python", "-m", "runyard.runtime.worker"]
    # the definition's resources, task_limits mapped onto the limits (a request above its
    # limit lowered to it: the API would refuse it)
    assert worker["resources"] == {"requests": {"cpu": "1500m", "memory": "1Gi"},
                                   "limits": {"memory": "4Gi", "cpu": "1500m"}}  # fmt: skip
    env = {e["name"]: e for e in worker["env"]}
    assert env["MODE"]["value"] == "fast"
    assert "valueFrom" in env["API_TOKEN"] and "s3cret" not in done.stdout  # redacted
    assert base64.b64decode(secret["data"]["env.API_TOKEN"]) == b"REDACTED"
    payload = yaml.safe_load(base64.b64decode(secret["data"]["stdin"]))
    assert payload["task_id"] == "base#demo#nightly" and payload["workspace"] == str(
        (tmp_path / ".runyard").resolve()
    )
    assert all(doc["metadata"].get("namespace") is None for doc in docs)  # kubectl -n
    assert pod["affinity"]["nodeAffinity"]  # hostPath mode: pinned to runyard's node


@pytest.mark.parametrize(
    ("args", "config", "needle"),
    [
        (["nosuch"], CONFIG, "nosuch"),
        (["demo", "x=one", "y=2"], CONFIG, "x"),
        (["demo", "x=1", "y=2"], "worker_env: {}\n", "kubernetes"),
        (["demo", "x=1", "y=2"], "kubernetes: {image: i}\n", "node"),  # hostPath, unpinned
    ],
)
def test_bad_input_gets_one_clear_error_and_no_yaml(
    tmp_path: Path, args: list[str], config: str, needle: str
) -> None:
    (tmp_path / "runyard.yaml").write_text(config)
    done = run_job(tmp_path, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and needle in done.stderr and "Traceback" not in done.stderr
