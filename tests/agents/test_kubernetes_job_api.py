"""How an agent run's pod reaches the Task Job API: the socket on one node (hostPath), TCP
through the Service in ``pvc`` mode (a ConfigError at start without its URL); the
manifests that make the two ends agree; and the pod's own record of its exit code, read
without trusting the folder the run writes to."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import PACKAGES, agent_settings
from api_helpers import agent_server, api, create_run, new_session

from runyard.agents.context import SandboxChoice
from runyard.agents.layout import Ownership
from runyard.errors import ConfigError
from runyard.executors.kubernetes.deployment import DeployOptions, deployment_manifests
from runyard.executors.kubernetes.manifests import build_manifests
from runyard.runtime.agentlaunch import (
    POD_EXIT_FILE,
    RunPlan,
    job_api_url,
    launch_spec,
    pod_exit_file,
    read_pod_exit_file,
)

pytest.importorskip("kubernetes")
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_fake_api import FakeKubernetes  # noqa: E402

IMAGE = "registry.example/runyard:1"


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes().start()
    yield server
    server.stop()


def kubeconfig(fake: FakeKubernetes, path: Path) -> str:
    cluster = {"name": "fake", "cluster": {"server": fake.url}}
    context = {"name": "fake", "context": {"cluster": "fake", "user": "fake"}}
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake", "clusters": [cluster],
        "users": [{"name": "fake", "user": {}}], "contexts": [context],
    }))  # fmt: skip
    return str(path)


def refused_start(root: Path, k8s: dict[str, object]) -> str:
    """``runyard serve`` with these kubernetes settings, expected to stop at start: its
    whole output (read to its end, unlike a server's output while it starts)."""
    root.mkdir()
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "none",
              "agent_executor": "kubernetes", "kubernetes": k8s}  # fmt: skip
    (root / "runyard.yaml").write_text(json.dumps(config))
    argv = [sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", "0",
            "--workspace-dir", str(root / "ws"), "--log-dir", str(root / "logs"),
            "--config", str(root / "runyard.yaml")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    done = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr


def test_pvc_mode_without_a_job_api_url_refuses_to_start(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    k8s = {"image": IMAGE, "kubeconfig": kubeconfig(fake, tmp_path / "kc"),
           "volume_mode": "pvc", "pvc_name": "data", "pvc_host_root": str(tmp_path)}  # fmt: skip
    output = refused_start(tmp_path / "srv", k8s)
    assert "kubernetes.job_api_url" in output and "volume_mode 'pvc'" in output, output


def test_a_job_api_url_the_server_would_refuse_as_host_stops_the_start(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    url = "http://runyard.elsewhere.svc:8765"
    k8s = {"image": IMAGE, "kubeconfig": kubeconfig(fake, tmp_path / "kc"), "volume_mode": "pvc",
           "pvc_name": "data", "pvc_host_root": str(tmp_path), "job_api_url": url}  # fmt: skip
    output = refused_start(tmp_path / "a", k8s)
    assert "names a host this server refuses (runyard.elsewhere.svc:8765)" in output, output
    server = agent_server(tmp_path / "b", "none", agent_executor="kubernetes", kubernetes=k8s,
                          allowed_hosts=["runyard.elsewhere.svc"])  # fmt: skip
    server.stop()  # it started: that name is now one of its own


def test_the_setting_decides_the_way_and_only_pvc_requires_it(tmp_path: Path) -> None:
    pvc = {"image": IMAGE, "volume_mode": "pvc", "pvc_name": "d", "pvc_host_root": "/data"}
    with pytest.raises(ConfigError, match="job_api_url"):
        job_api_url(agent_settings(tmp_path, "none", agent_executor="kubernetes", kubernetes=pvc))
    url = "http://runyard.runyard.svc:8765"
    given = {**pvc, "job_api_url": url}
    assert job_api_url(
        agent_settings(tmp_path, "none", agent_executor="kubernetes", kubernetes=given)
    ) == url
    single_node = {"image": IMAGE, "node_name": "n1"}
    assert job_api_url(
        agent_settings(tmp_path, "none", agent_executor="kubernetes", kubernetes=single_node)
    ) is None  # hostPath: the socket, shared with the server's node
    # local runs never use it, whatever the kubernetes block says
    assert job_api_url(agent_settings(tmp_path, "none", kubernetes=given)) is None
    for wrong in ("runyard:8765", "http://runyard/api", "http://user:pw@runyard", "ftp://x"):
        with pytest.raises(ValueError, match="job_api_url"):
            agent_settings(tmp_path, "none", kubernetes={**given, "job_api_url": wrong})


def test_in_hostpath_mode_the_run_keeps_the_socket(fake: FakeKubernetes, tmp_path: Path) -> None:
    k8s = {"image": IMAGE, "kubeconfig": kubeconfig(fake, tmp_path / "kc"), "node_name": "n1"}
    server = agent_server(tmp_path / "srv", "none", agent_executor="kubernetes", kubernetes=k8s)
    try:
        with api(server) as client:
            run = create_run(client, new_session(client), "answer x", package="probe")
        folder = server.workspace / "agent" / "workspaces" / run["id"]
        context = json.loads((folder / "in" / "run-context.json").read_text())
    finally:
        server.stop()
    facts = context["envFacts"]
    assert facts["apiSocket"] == "/var/run/runyard-api/api.sock" and facts["apiUrl"] is None
    assert context["builtInTools"][0]["transport"] == "http+unix"


def test_the_deployment_gives_runs_its_service_and_lets_them_reach_its_pods() -> None:
    options = DeployOptions(namespace="lab", name="ry", port=9000)
    docs = {doc["kind"]: doc for doc in deployment_manifests(options)}
    env = {e["name"]: e.get("value") for e in
           docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}  # fmt: skip
    url = env["RUNYARD_KUBERNETES__JOB_API_URL"]
    service = docs["Service"]
    assert url == f"http://{service['metadata']['name']}.lab.svc:{service['spec']['ports'][0]['port']}"
    assert "ry.lab.svc" in json.loads(env["RUNYARD_ALLOWED_HOSTS"])  # its Host header passes
    # a run's NetworkPolicy selects the Deployment's pods, on the port they listen on
    settings = agent_settings(Path("/tmp"), "none", agent_executor="kubernetes", kubernetes={
        "image": IMAGE, "volume_mode": "pvc", "pvc_name": "ry-data", "pvc_host_root": "/data",
        "job_api_url": url})  # fmt: skip
    assert settings.kubernetes is not None
    plan = RunPlan(run_id="run-1", session_id="s-1", run_dir=Path("/data/w/run-1"),
                   state_dir=Path("/data/w/s"), package_dir=Path("/data/p"), socket_path=None,
                   log_path=Path("/data/l"), exit_file=Path("/data/w/run-1/exit-code"),
                   argv=["python3", "agent.py"], env={})  # fmt: skip
    spec = launch_spec(plan, SandboxChoice("kubernetes"), Ownership(None, None), 60, "/bin/sh")
    policy = build_manifests(spec, settings.kubernetes, "run-1", None).dependents[-1]
    server_rule = policy["spec"]["egress"][0]
    pod_labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    wanted = server_rule["to"][0]["podSelector"]["matchLabels"]
    assert wanted.items() <= pod_labels.items()
    ports = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert server_rule["ports"] == [{"protocol": "TCP", "port": ports[0]["containerPort"]}]
    # a task's pod (no agent-run label) gets no way to the server
    untagged = dataclasses.replace(spec, labels={})
    task = build_manifests(untagged, settings.kubernetes, "run-2", None).dependents[-1]
    assert "egress" not in task["spec"]


def test_a_pods_exit_file_is_read_without_following_what_the_run_put_there(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "tmp").mkdir(parents=True)
    recorded = pod_exit_file(run_dir)
    assert recorded == run_dir / "tmp" / POD_EXIT_FILE
    assert read_pod_exit_file(recorded) is None  # none written
    recorded.write_text("3\n")
    assert read_pod_exit_file(recorded) == 3
    secret = tmp_path / "server-only"
    secret.write_text("0\n")
    recorded.unlink()
    recorded.symlink_to(secret)  # the run's folder: a link to a file of the server's
    assert read_pod_exit_file(recorded) is None
    recorded.unlink()
    os.mkfifo(recorded)  # would block a plain open
    assert read_pod_exit_file(recorded) is None
    recorded.unlink()
    recorded.write_text("x" * 100)
    assert read_pod_exit_file(recorded) is None


def test_a_finished_pod_writes_its_code_where_the_server_reads_it(tmp_path: Path) -> None:
    # the recorder as the pod's shell runs it, its /workspace/tmp at the run's tmp/ (the
    # server's use of it, a Job that vanished, is end to end in test_kubernetes_e2e)
    run_dir = tmp_path / "run"
    (run_dir / "tmp").mkdir(parents=True)
    plan = RunPlan(run_id="run-1", session_id="s-1", run_dir=run_dir, state_dir=tmp_path,
                   package_dir=tmp_path, socket_path=None, log_path=tmp_path / "log",
                   exit_file=run_dir / "exit-code", argv=["sh", "-c", "exit 7"], env={})  # fmt: skip
    spec = launch_spec(plan, SandboxChoice("kubernetes"), Ownership(None, None), 60, "/bin/sh")
    argv = [a.replace("/workspace/tmp", str(run_dir / "tmp")) for a in spec.argv]
    assert subprocess.run(argv, check=False).returncode == 7
    assert read_pod_exit_file(pod_exit_file(run_dir)) == 7
    no_shell = launch_spec(plan, SandboxChoice("kubernetes"), Ownership(None, None), 60, None)
    assert no_shell.argv == plan.argv  # an image without a shell: no record, as before


def test_the_pods_recorder_passes_sigterm_on_to_the_agent(tmp_path: Path) -> None:
    # the kubelet signals the container's PID 1 only, which is now the recorder's shell
    run_dir = tmp_path / "run"
    (run_dir / "tmp").mkdir(parents=True)
    ready = tmp_path / "ready"
    agent = ("import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
             f"open({str(ready)!r}, 'w').close()\n"
             "time.sleep(60)\n")  # fmt: skip
    plan = RunPlan(run_id="run-1", session_id="s-1", run_dir=run_dir, state_dir=tmp_path,
                   package_dir=tmp_path, socket_path=None, log_path=tmp_path / "log",
                   exit_file=run_dir / "exit-code", argv=[sys.executable, "-c", agent], env={})  # fmt: skip
    spec = launch_spec(plan, SandboxChoice("kubernetes"), Ownership(None, None), 60, "/bin/sh")
    argv = [a.replace("/workspace/tmp", str(run_dir / "tmp")) for a in spec.argv]
    shell = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and shell.poll() is None, "the agent never started"
            time.sleep(0.02)
        shell.send_signal(signal.SIGTERM)  # the shell alone, as the kubelet does
        assert shell.wait(30) == 7  # the agent's own handler ran and chose the code
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    assert read_pod_exit_file(pod_exit_file(run_dir)) == 7
