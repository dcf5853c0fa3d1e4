"""The Kubernetes manifests as pure functions: every rule asserted on the produced dicts."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from runyard.config import Settings
from runyard.errors import ConfigError, ExecutorError
from runyard.executors.base import LaunchSpec, Limits, Mount
from runyard.executors.kubernetes.manifests import RESUME_PATCH, build_manifests, owned_by
from runyard.executors.kubernetes.names import RUN_ID_LABEL, resource_name, run_id_of
from runyard.executors.kubernetes.package import PackageTooLarge, read_package
from runyard.kubernetes_settings import KubernetesSettings

TOKEN = "tok-3f9a-very-secret"


def settings(**overrides: Any) -> KubernetesSettings:
    return KubernetesSettings(image="registry.example/agent:1", **overrides)


def spec(**overrides: Any) -> LaunchSpec:
    values: dict[str, Any] = {
        "argv": ["python", "-m", "agent"],
        "log_path": Path("/var/log/run.log"),
        "labels": {RUN_ID_LABEL: "run-1"},
    }
    values.update(overrides)
    return LaunchSpec(**values)


def build(launch: LaunchSpec | None = None, config: KubernetesSettings | None = None,
          package: Any = None) -> Any:
    launch = launch or spec()
    return build_manifests(launch, config or settings(), run_id_of(launch.labels), package)


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def worker_of(job: dict[str, Any]) -> dict[str, Any]:
    return pod_of(job)["containers"][0]


def mounts_by_path(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in worker_of(job)["volumeMounts"]}


def volumes_by_name(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_of(job)["volumes"]}


def dependent(manifests: Any, kind: str) -> dict[str, Any]:
    return next(d for d in manifests.dependents if d["kind"] == kind)


def test_job_is_suspended_single_try_with_deadline_and_ttl() -> None:
    job = build(spec(limits=Limits(timeout_seconds=90.2)), settings(ttl_seconds_after_finished=600)).job
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["name"] == "runyard-run-1"
    assert job["spec"]["suspend"] is True and job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 91
    assert job["spec"]["ttlSecondsAfterFinished"] == 600
    assert pod_of(job)["restartPolicy"] == "Never"
    assert RESUME_PATCH == {"spec": {"suspend": False}}


def test_no_deadline_without_timeout_and_no_ttl_when_disabled() -> None:
    job = build(config=settings(ttl_seconds_after_finished=None)).job
    assert "activeDeadlineSeconds" not in job["spec"] and "ttlSecondsAfterFinished" not in job["spec"]


def test_labels_mark_the_run_and_keep_caller_labels() -> None:
    launch = spec(labels={RUN_ID_LABEL: "run-1", "team": "nlp", "task": "base#demo#x"})
    manifests = build(launch, package=None)
    meta = manifests.job["metadata"]
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "runyard", RUN_ID_LABEL: "run-1", "team": "nlp"
    }
    assert meta["annotations"] == {"task": "base#demo#x"}  # not a valid label value
    template = manifests.job["spec"]["template"]["metadata"]
    assert template["labels"] == meta["labels"] and "name" not in template
    with pytest.raises(ExecutorError, match="not a valid Kubernetes label key"):
        build(spec(labels={"bad key!": "x"}))


def test_run_ids_become_dns_names() -> None:
    generated = run_id_of({})
    assert generated != run_id_of({}) and len(resource_name(generated)) <= 63
    long_a, long_b = "A_" + "x" * 70, "A_" + "x" * 69 + "y"
    for odd in ("Run_ONE", long_a):
        name = resource_name(odd)
        assert len(name) <= 63 and name == name.lower() and name.startswith("runyard-")
    assert resource_name(long_a) != resource_name(long_b)
    with pytest.raises(ExecutorError, match="not a valid label value"):
        run_id_of({RUN_ID_LABEL: "has space"})
    assert run_id_of({"runyard.agent-run": "run-0193f2c4a1b2-9f3e1c7a"}) == "run-0193f2c4a1b2-9f3e1c7a"
    assert run_id_of({"runyard.agent-run": "a", RUN_ID_LABEL: "b"}) == "b"


def test_host_path_mounts_honour_read_only(tmp_path: Path) -> None:
    run = tmp_path / "ws" / "run-1"
    (run / "in").mkdir(parents=True)
    (run / "in" / "data.csv").write_text("a,b\n")
    mounts = [Mount(run / "in", "/workspace/in"),
              Mount(run / "in" / "data.csv", "/workspace/in/data.csv", read_only=True),
              Mount(run, "/workspace"),
              Mount(Path("/data/grant"), "/workspace/mounts/grant", read_only=True)]
    job = build(spec(mounts=mounts, cwd=Path("/workspace"))).job
    assert [m["mountPath"] for m in worker_of(job)["volumeMounts"]] == [
        "/tmp", "/workspace", "/workspace/in", "/workspace/in/data.csv",
        "/workspace/mounts/grant"]  # parents first
    by_path, volumes = mounts_by_path(job), volumes_by_name(job)
    assert by_path["/workspace"]["readOnly"] is False
    assert by_path["/workspace/in"]["readOnly"] is False
    assert by_path["/workspace/in/data.csv"]["readOnly"] is True
    data = volumes[by_path["/workspace/in/data.csv"]["name"]]
    assert data["hostPath"] == {"path": str(run / "in" / "data.csv"), "type": "File"}
    grant = volumes[by_path["/workspace/mounts/grant"]["name"]]
    assert grant["hostPath"] == {"path": "/data/grant", "type": "Directory"}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
    assert worker_of(job)["workingDir"] == "/workspace"  # a path inside the pod
    with pytest.raises(ExecutorError, match="inside the pod"):
        build(spec(mounts=mounts, cwd=Path("relative/dir")))


def test_a_tmp_mount_replaces_the_empty_dir() -> None:
    job = build(spec(mounts=[Mount(Path("/srv/ws/run-1/tmp"), "/tmp")])).job
    assert mounts_by_path(job)["/tmp"]["name"] == "mount-0"
    assert "tmp" not in volumes_by_name(job)


def test_pvc_mode_uses_one_claim_with_sub_paths() -> None:
    config = settings(volume_mode="pvc", pvc_name="runyard-data", pvc_host_root=Path("/srv/ws"))
    mounts = [Mount(Path("/srv/ws/agent/workspaces/run-1"), "/workspace"),
              Mount(Path("/srv/ws/agent/session-state/s1"), "/workspace/state"),
              Mount(Path("/srv/ws"), "/data", read_only=True)]
    job = build(spec(mounts=mounts), config).job
    assert volumes_by_name(job)["workspace"]["persistentVolumeClaim"] == {"claimName": "runyard-data"}
    assert not any("hostPath" in v for v in pod_of(job)["volumes"])
    by_path = mounts_by_path(job)
    assert by_path["/workspace"]["subPath"] == "agent/workspaces/run-1"
    assert by_path["/workspace/state"]["subPath"] == "agent/session-state/s1"
    assert "subPath" not in by_path["/data"] and by_path["/data"]["readOnly"] is True
    with pytest.raises(ExecutorError, match="outside pvc_host_root"):
        build(spec(mounts=[Mount(Path("/home/me/grant"), "/workspace/g")]), config)


@pytest.mark.parametrize(
    ("target", "message"),
    [("workspace", "absolute"), ("/workspace/../etc", "normalised"), ("/run/runyard", "reserved"),
     ("/run/runyard/x", "reserved"), ("/opt/agent/package/x", "reserved"), ("/", "absolute")],
)
def test_bad_mount_targets_are_refused(target: str, message: str) -> None:
    with pytest.raises(ExecutorError, match=message):
        build(spec(mounts=[Mount(Path("/srv/x"), target)]))


def test_duplicate_targets_and_relative_host_paths_are_refused() -> None:
    with pytest.raises(ExecutorError, match="share the target"):
        build(spec(mounts=[Mount(Path("/a"), "/w"), Mount(Path("/b"), "/w")]))
    with pytest.raises(ExecutorError, match="must be absolute"):
        build(spec(mounts=[Mount(Path("rel"), "/w")]))


def test_security_context_is_explicit_and_locked_down() -> None:
    job = build(config=settings(run_as_user=1500, run_as_group=1600)).job
    assert pod_of(job)["securityContext"] == {
        "runAsUser": 1500, "runAsGroup": 1600, "fsGroup": 1600, "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"}, "fsGroupChangePolicy": "OnRootMismatch",
    }
    assert worker_of(job)["securityContext"] == {
        "allowPrivilegeEscalation": False, "privileged": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    }
    assert pod_of(job)["automountServiceAccountToken"] is False
    assert mounts_by_path(job)["/tmp"]["name"] == "tmp"
    root = build(config=settings(run_as_user=0, run_as_group=0, fs_group=2000)).job
    assert pod_of(root)["securityContext"]["runAsNonRoot"] is False
    assert pod_of(root)["securityContext"]["fsGroup"] == 2000


def test_secret_env_goes_to_the_secret_never_into_the_job() -> None:
    env = {"RUNYARD_TOKEN": TOKEN, "OPENAI_API_KEY": "sk-abc123", "MODE": "fast",
           "PATH": "/home/me/.venv/bin:/usr/bin", "RUNYARD_API_TOKEN": "run-scoped-tok"}
    manifests = build(spec(env=env))
    job_text = json.dumps(manifests.job)
    for value in (TOKEN, "sk-abc123", "run-scoped-tok"):
        assert value not in job_text and base64.b64encode(value.encode()).decode() not in job_text
    entries = {e["name"]: e for e in worker_of(manifests.job)["env"]}
    assert entries["MODE"] == {"name": "MODE", "value": "fast"}
    assert entries["RUNYARD_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "runyard-run-1", "key": "env.RUNYARD_TOKEN"}
    assert entries["PATH"]["value"] == "/home/me/.venv/bin:/usr/bin"  # passed as given
    host_aware = build(spec(env=env), settings(host_env=["PATH"]))
    assert "PATH" not in {e["name"] for e in worker_of(host_aware.job)["env"]}
    secret = dependent(manifests, "Secret")
    assert secret["type"] == "Opaque" and secret["immutable"] is True
    assert base64.b64decode(secret["data"]["env.RUNYARD_TOKEN"]).decode() == TOKEN
    assert base64.b64decode(secret["data"]["env.OPENAI_API_KEY"]).decode() == "sk-abc123"
    assert base64.b64decode(secret["data"]["env.RUNYARD_API_TOKEN"]) == b"run-scoped-tok"
    assert "env.MODE" not in secret["data"]
    everything = build(spec(env=env), settings(secret_env=["*"]))
    assert all("valueFrom" in e for e in worker_of(everything.job)["env"])


def test_stdin_is_a_secret_file_fed_by_a_shell() -> None:
    manifests = build(spec(stdin=b'{"prompt": "hi"}'))
    worker = worker_of(manifests.job)
    assert worker["command"] == ["/bin/sh", "-c", 'exec "$@" < /run/runyard/stdin',
                                 "runyard-worker", "python", "-m", "agent"]
    assert {"name": "RUNYARD_STDIN_FILE", "value": "/run/runyard/stdin"} in worker["env"]
    stdin_mount = mounts_by_path(manifests.job)["/run/runyard"]
    assert stdin_mount["readOnly"] is True
    source = volumes_by_name(manifests.job)[stdin_mount["name"]]["secret"]
    assert source == {"secretName": "runyard-run-1", "defaultMode": 0o440,
                      "items": [{"key": "stdin", "path": "stdin"}]}
    assert base64.b64decode(dependent(manifests, "Secret")["data"]["stdin"]) == b'{"prompt": "hi"}'
    assert '"prompt"' not in json.dumps(manifests.job)
    plain = build(spec(stdin=b"x"), settings(stdin_shell=None))
    assert worker_of(plain.job)["command"] == ["python", "-m", "agent"]
    nothing = build(spec())
    assert [d["kind"] for d in nothing.dependents] == ["NetworkPolicy"]  # metadata blocked
    assert worker_of(nothing.job)["env"] == []
    assert "/run/runyard" not in mounts_by_path(nothing.job)


def test_oversized_secret_is_a_clear_error() -> None:
    with pytest.raises(ExecutorError, match="exceed the 1048576 bytes"):
        build(spec(stdin=b"x" * (1 << 20) + b"y"))


def test_kubernetes_variable_expansion_is_escaped() -> None:
    job = build(spec(argv=["echo", "$(HOME)"], env={"GREETING": "hi $(USER)"})).job
    assert worker_of(job)["command"] == ["echo", "$$(HOME)"]
    assert worker_of(job)["env"] == [{"name": "GREETING", "value": "hi $$(USER)"}]
    with pytest.raises(ExecutorError, match="argv is empty"):
        build(spec(argv=[]))
    with pytest.raises(ExecutorError, match="Environment name"):
        build(spec(env={"1BAD": "x"}))


def test_every_container_has_requests_and_limits_and_run_limits_win() -> None:
    assert worker_of(build().job)["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    job = build(spec(limits=Limits(cpu=0.5, memory_bytes=256 << 20))).job
    assert worker_of(job)["resources"] == {  # the request is lowered to the run's limit
        "requests": {"cpu": "250m", "memory": str(256 << 20)},
        "limits": {"cpu": "500m", "memory": str(256 << 20)}}
    configured = settings(resources={"requests": {"cpu": "1", "memory": "1Gi"},
                                     "limits": {"cpu": "2", "memory": "4Gi"}})
    assert worker_of(build(config=configured).job)["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    with pytest.raises(ValueError, match="resources"):
        settings(resources={"requests": {"cpu": "lots"}})


def test_network_off_adds_a_deny_all_policy() -> None:
    policy = dependent(build(spec(network=False)), "NetworkPolicy")
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "runyard",
                                        RUN_ID_LABEL: "run-1"}},
        "policyTypes": ["Ingress", "Egress"],
    }
    assert build(spec(network=False), settings(network_policy=False)).dependents == []


def test_network_on_still_blocks_the_cloud_metadata_address() -> None:
    policy = dependent(build(spec(network=True)), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"][0] == {"to": [
        {"ipBlock": {"cidr": "0.0.0.0/0",
                     "except": ["169.254.169.254/32", "169.254.170.2/32", "169.254.170.23/32"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128", "fd00:ec2::23/128"]}}]}
    # only the metadata and credential addresses: NodeLocal DNS (169.254.20.10) stays reachable
    assert policy["spec"]["egress"][1]["to"][1] == {"ipBlock": {"cidr": "169.254.20.10/32"}}
    assert build(spec(network=True), settings(network_policy=False)).dependents == []


def test_dependents_are_owned_by_the_job() -> None:
    manifests = build(spec(stdin=b"x", network=False))
    for item in manifests.dependents:
        owned = owned_by(item, manifests.name, "uid-123")
        assert owned["metadata"]["ownerReferences"] == [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "runyard-run-1", "uid": "uid-123"}]
        assert "ownerReferences" not in item["metadata"]
        assert owned["metadata"]["labels"][RUN_ID_LABEL] == "run-1"


def make_package(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "manifest.json").write_text('{"entry": ["bin/run.sh"]}')
    (root / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "bin" / "run.sh", 0o755)
    (root / "model.bin").write_bytes(b"\xff\xfe\x00binary")
    return root


def test_package_becomes_a_config_map_at_opt_agent_package(tmp_path: Path) -> None:
    package = read_package(make_package(tmp_path / "pkg"))
    manifests = build(package=package)
    config_map = dependent(manifests, "ConfigMap")
    assert config_map["immutable"] is True
    items = {i["path"]: i for i in package.items}
    assert set(items) == {"bin/run.sh", "manifest.json", "model.bin"}
    assert items["bin/run.sh"]["mode"] == 0o555 and items["manifest.json"]["mode"] == 0o444
    assert config_map["data"][items["bin/run.sh"]["key"]] == "#!/bin/sh\necho hi\n"
    binary = config_map["binaryData"][items["model.bin"]["key"]]
    assert base64.b64decode(binary) == b"\xff\xfe\x00binary"
    mount = mounts_by_path(manifests.job)["/opt/agent/package"]
    assert mount["readOnly"] is True
    source = volumes_by_name(manifests.job)[mount["name"]]["configMap"]
    assert source["name"] == "runyard-run-1" and source["items"] == package.items


def test_package_over_one_mebibyte_is_refused_clearly(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"a" * (700 << 10))
    (folder / "b.bin").write_bytes(b"b" * (400 << 10))
    with pytest.raises(PackageTooLarge, match="at most 1048576 bytes") as caught:
        read_package(folder)
    assert caught.value.folder == folder and caught.value.size > 1 << 20
    (folder / "b.bin").unlink()
    (folder / "link").symlink_to(folder / "a.bin")
    with pytest.raises(ExecutorError, match="not a regular file"):
        read_package(folder)
    with pytest.raises(ExecutorError, match="does not exist"):
        read_package(tmp_path / "missing")


def test_settings_hold_the_kubernetes_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("RUNYARD_CONFIG", "RUNYARD_KUBERNETES__IMAGE"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.load().kubernetes is None
    (tmp_path / "runyard.yaml").write_text(
        "agent_executor: kubernetes\nkubernetes:\n  namespace: agents\n  image: a:1\n"
        "  volume_mode: pvc\n  pvc_name: data\n  pvc_host_root: /srv/ws\n")
    loaded = Settings.load()
    assert loaded.agent_executor == "kubernetes" and loaded.kubernetes is not None
    assert loaded.kubernetes.namespace == "agents" and loaded.kubernetes.pvc_name == "data"
    (tmp_path / "runyard.yaml").write_text("kubernetes:\n  image: a:1\n  volume_mode: pvc\n")
    with pytest.raises(ConfigError, match="pvc_name"):
        Settings.load()
    (tmp_path / "runyard.yaml").write_text("kubernetes:\n  namespace: Not_A_Name\n  image: a\n")
    with pytest.raises(ConfigError, match="namespace"):
        Settings.load()


def test_every_kubernetes_setting_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "kubernetes.md").read_text()
    rows = {cell.strip("` ") for line in doc.splitlines() if line.startswith("| `")
            for cell in line.split("|")[1].split("/")}
    assert set(KubernetesSettings.model_fields) - rows == set()
