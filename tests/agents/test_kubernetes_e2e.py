"""Agent runs end to end on Kubernetes without a cluster: a real server with
``agent_executor: kubernetes`` → the real ``kubernetes`` client → the fake API server →
the test kubelet, which really runs the pod's command (in bubblewrap, the pod's volumes at
their paths) → the agent package → its answer recorded by the server.

Covers success (the reference agent, its demo task through the Job API socket), failure,
cancel (the pod's process is killed), a pod deleted under a run (a node loss) and a pod
never scheduled, each with Kubernetes' reason in the run's error; a run that ended while
the server was down and whose Job was deleted meanwhile (its own exit record decides);
and the ``pvc`` volume mode: the run's folders reach the pod as subPaths of the claim, and
the pod reaches the Job API over TCP through a stand-in for the Service, with exactly the
run token's scope."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run
from k8s_service import ServicePort

from runyard.agents.layout import AgentLayout
from runyard.executors.kubernetes.names import resource_name
from runyard.runtime.agentlaunch import POD_SOCKET_DIR
from serverproc import ServerProcess

pytest.importorskip("kubernetes")
pytestmark = pytest.mark.sandbox
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_cluster import container_of, wait_for, write_kubeconfig  # noqa: E402
from k8s_fake_api import FakeKubernetes  # noqa: E402
from k8s_kubelet import Kubelet  # noqa: E402

IMAGE = "registry.example/runyard:1"




@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKubernetes, Kubelet, Path]]:
    fake = FakeKubernetes().start()
    kubelet = Kubelet(fake).start()
    yield fake, kubelet, write_kubeconfig(fake, tmp_path / "kubeconfig")
    kubelet.stop()
    fake.stop()


def hostpath_server(root: Path, kubeconfig: Path, **k8s: Any) -> ServerProcess:
    k8s = {"image": IMAGE, "kubeconfig": str(kubeconfig), "request_timeout_seconds": 5,
           "log_retry_seconds": 0.05, "log_drain_seconds": 2,
           # hostPath volumes: the pods must land on this node
           "node_selector": {"kubernetes.io/hostname": "test-node"}, **k8s}  # fmt: skip
    return agent_server(root, "none", agent_executor="kubernetes", kubernetes=k8s,
                        cancel_grace_seconds=1.0)  # fmt: skip


@pytest.fixture
def server(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> Iterator[ServerProcess]:
    proc = hostpath_server(tmp_path / "srv", cluster[2])
    yield proc
    proc.stop()






def test_the_reference_agent_runs_in_a_pod_and_its_answer_is_recorded(
    cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = cluster
    with api(server) as client:
        session = new_session(client)
        run = create_run(client, session, "what is in the pod?")
        assert run["isolation"] == "kubernetes"
        done = wait_run(client, run["id"])
        assert done["state"] == "succeeded", done
        answer = client.get(f"/runs/{run['id']}/files/final-answer.md").text
        assert "isolation kubernetes" in answer and "what is in the pod?" in answer
        report = json.loads(client.get(f"/runs/{run['id']}/files/report.json").content)
        assert report["demo"]["success"] is True  # a task submitted over the API socket
        history = client.get(f"/sessions/{session}").json()["history"]
        assert history[-1]["content"] == answer
    container = container_of(kubelet, run["id"])
    assert container.proc.returncode == 0  # the kubelet really ran it
    pod = fake.logs[container.pod].decode()
    assert "reference agent: wrote out/final-answer.md" in pod


def test_a_failing_run_a_cancelled_run_and_a_lost_pod(
    cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = cluster
    with api(server) as client:
        session = new_session(client)
        failing = create_run(client, session, "answer partial\nexit 3", package="probe")
        failed = wait_run(client, failing["id"])
        assert failed["state"] == "failed" and failed["exitCode"] == 3, failed

        slow = create_run(client, session, "sleep 60", package="probe")
        running = container_of(kubelet, slow["id"])
        wait_for(lambda: b"probe: sleep 60" in fake.logs.get(running.pod, b""))
        reply = client.post(f"/runs/{slow['id']}/cancel", json={})
        assert reply.status_code == 200, reply.text
        cancelled = wait_run(client, slow["id"])
        assert cancelled["state"] == "cancelled", cancelled
        wait_for(lambda: running.proc.poll() is not None, timeout=10)  # the pod's process died

        lost = create_run(client, session, "sleep 60", package="probe")
        victim = container_of(kubelet, lost["id"])
        wait_for(lambda: b"probe: sleep 60" in fake.logs.get(victim.pod, b""))
        deleted = httpx.delete(f"{fake.url}/api/v1/namespaces/default/pods/{victim.pod}",
                               params={"gracePeriodSeconds": "0"})  # fmt: skip
        assert deleted.status_code == 200  # what a node loss or an eviction does to it
        ended = wait_run(client, lost["id"])
        # the Job failed with no container exit code: 255, and the Job controller's reason
        assert ended["state"] == "failed" and ended["exitCode"] == 255, ended
        assert ended["error"] == (
            "The agent exited with code 255 (Job failed: BackoffLimitExceeded: "
            "Job has reached the specified backoff limit)"
        ), ended
        assert victim.proc.poll() is not None
    assert failed["error"] == "The agent exited with code 3"  # a plain exit: nothing to add
    assert cancelled["error"] == "Cancelled on request"


def test_a_run_whose_pod_is_never_scheduled_fails_with_the_schedulers_words(
    tmp_path: Path,
) -> None:
    fake = FakeKubernetes().start()  # no kubelet: nothing would run the pod anyway
    server = hostpath_server(tmp_path / "srv", write_kubeconfig(fake, tmp_path / "kubeconfig"),
                             start_timeout_seconds=2)  # fmt: skip
    try:
        with api(server) as client:
            run = create_run(client, new_session(client), "answer never", package="probe")
            name = resource_name(run["id"])
            wait_for(lambda: any(kind == "Pod" and obj["metadata"]["labels"].get("job-name")
                                 == name for (kind, _, _), obj in list(fake.objects.items())))  # fmt: skip
            fake.set_unschedulable(name, "0/3 nodes are available: 3 Insufficient memory.")
            ended = wait_run(client, run["id"])
    finally:
        server.stop()
        fake.stop()
    assert ended["state"] == "failed" and ended["exitCode"] == 125, ended
    assert ended["error"] == (
        "The agent exited with code 125 (not started within 2 s: Unschedulable: "
        "0/3 nodes are available: 3 Insufficient memory.)"
    ), ended


def test_a_run_that_ended_unwatched_after_its_job_vanished_reports_its_own_exit(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> None:
    # the server is down longer than the Job's TTL: the Job is gone when it comes back
    fake, kubelet, kubeconfig = cluster
    first = hostpath_server(tmp_path / "srv", kubeconfig)
    with api(first) as client:
        session = new_session(client)
        run = create_run(client, session, "wait-for go\nanswer done unwatched", package="probe")
        pod = container_of(kubelet, run["id"])
        wait_for(lambda: b"probe: wait-for go" in fake.logs.get(pod.pod, b""))
    first.stop(keep_runs=True)
    (first.workspace / "agent" / "session-state" / session / "go").touch()
    wait_for(lambda: pod.done)  # the pod ended, and its Job Complete, with nobody watching
    name = resource_name(run["id"])
    gone = httpx.delete(f"{fake.url}/apis/batch/v1/namespaces/default/jobs/{name}",
                        params={"propagationPolicy": "Background"})  # fmt: skip
    assert gone.status_code == 200, gone.text
    wait_for(lambda: not fake.kinds_named(name))
    second = hostpath_server(tmp_path / "srv", kubeconfig)
    try:
        with api(second) as client:
            done = wait_run(client, run["id"])
            answer = client.get(f"/runs/{run['id']}/files/final-answer.md").text
    finally:
        second.stop()
    assert done["state"] == "succeeded" and done["exitCode"] == 0, done
    assert answer == "done unwatched"


def pvc_server(kubelet: Kubelet, kubeconfig: Path, service: ServicePort) -> ServerProcess:
    """A server whose workspace is the claim ``runyard-data`` (as /data in the Deployment),
    its run pods reaching the Job API through ``service``."""
    # a short root: the server's own socket (still bound for local use) must fit in a path
    root = Path(tempfile.mkdtemp(prefix="ry-claim-", dir="/tmp"))
    kubelet.claims["runyard-data"] = root
    k8s = {"image": IMAGE, "kubeconfig": str(kubeconfig), "request_timeout_seconds": 5,
           "log_retry_seconds": 0.05, "log_drain_seconds": 2, "volume_mode": "pvc",
           "pvc_name": "runyard-data", "pvc_host_root": str(root),
           "job_api_url": service.url}  # fmt: skip
    server = agent_server(root, "none", agent_executor="kubernetes", kubernetes=k8s)
    service.route_to(server.url)
    return server


@pytest.fixture
def service() -> Iterator[ServicePort]:
    port = ServicePort()
    yield port
    port.close()


def test_in_pvc_mode_the_pod_reaches_the_job_api_over_tcp_through_the_claim(
    cluster: tuple[FakeKubernetes, Kubelet, Path], service: ServicePort
) -> None:
    fake, kubelet, kubeconfig = cluster
    server = pvc_server(kubelet, kubeconfig, service)
    try:
        with api(server) as client:
            run = create_run(client, new_session(client), "through the claim")
            done = wait_run(client, run["id"])
            assert done["state"] == "succeeded", (done["error"], done["exitCode"])
            report = json.loads(client.get(f"/runs/{run['id']}/files/report.json").content)
        folder = server.workspace / "agent" / "workspaces" / run["id"]
        context = json.loads((folder / "in" / "run-context.json").read_text())
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
    # the server answered the pod's submit as it answers a run token (a Kubernetes run's
    # tasks cannot run sandboxed yet): only a request that reached it gets these words
    assert report["demo"]["state"] == "refused", report["demo"]
    assert "agent runs execute on Kubernetes" in report["demo"]["reason"]
    assert service.connections >= 1  # through the Service, not the socket
    tool = context["builtInTools"][0]
    assert (tool["transport"], tool["baseUrl"], tool["socket"]) == ("http", service.url, None)
    facts = context["envFacts"]
    assert (facts["apiUrl"], facts["apiSocket"]) == (service.url, None)
    name = resource_name(run["id"])
    created = {r.body["kind"]: r.body for r in fake.requests if r.method == "POST"
               and isinstance(r.body, dict) and r.body["metadata"]["name"] == name}  # fmt: skip
    pod = created["Job"]["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v]  # fmt: skip
    assert claims == ["runyard-data"] and all("hostPath" not in v for v in pod["volumes"])
    mounts = pod["containers"][0]["volumeMounts"]
    assert all(m.get("subPath") for m in mounts if m["mountPath"].startswith("/workspace"))
    assert all(not m["mountPath"].startswith(POD_SOCKET_DIR) for m in mounts)  # no socket
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RUNYARD_API_URL"] == service.url and "RUNYARD_API_SOCKET" not in env
    # the pod may reach the server's pods on the Service's port (and DNS), nothing else
    egress = created["NetworkPolicy"]["spec"]["egress"]
    server_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "runyard"}}}
    assert egress[0] == {"to": [server_pods], "ports": [{"protocol": "TCP", "port": service.port}]}
    assert {p["port"] for p in egress[1]["ports"]} == {53} and len(egress) == 2


SCOPE_PROBES = [  # (method, path, body): what a run token may and may not do
    ("POST", "/jobs/list_task_ids", {"arguments": {}}),
    ("GET", "/api/v1/sessions/{own}", None),
    ("GET", "/api/v1/sessions/{other}", None),
    ("GET", "/api/v1/runs/{other_run}", None),
    ("GET", "/api/v1/runs?sessionId={other}", None),
    ("POST", "/api/v1/gc", {"dryRun": True}),
    ("POST", "/jobs/list_task_ids", {"arguments": {}, "target": "elsewhere"}),
    ("POST", "/api/v1/sessions", {"title": "mine"}),
    ("GET", "/metrics", None),
]


def ask(transport: httpx.BaseTransport | None, url: str, token: str,
        probes: list[tuple[str, str, Any]]) -> list[int]:  # fmt: skip
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, transport=transport, headers=headers, timeout=30) as http:
        return [http.request(method, path, json=body).status_code
                for method, path, body in probes]  # fmt: skip


def test_a_run_token_over_tcp_has_exactly_its_socket_scope(
    cluster: tuple[FakeKubernetes, Kubelet, Path], service: ServicePort
) -> None:
    _, kubelet, kubeconfig = cluster
    server = pvc_server(kubelet, kubeconfig, service)
    try:
        with api(server) as client:
            other = new_session(client)
            other_run = create_run(client, other, "answer theirs", package="probe")
            wait_run(client, other_run["id"])
            own = new_session(client)
            script = "\n".join([f"api GET /api/v1/sessions/{own}",
                                f"api GET /api/v1/runs/{other_run['id']}",
                                "token", "wait-for go", "answer mine"])  # fmt: skip
            run = create_run(client, own, script, package="probe")
            token = wait_file(client, run["id"], "token").decode()
            ids = {"own": own, "other": other, "other_run": other_run["id"]}
            probes = [(m, p.format(**ids), b) for m, p, b in SCOPE_PROBES]
            over_tcp = ask(None, service.url, token, probes)
            sock = AgentLayout(server.workspace / "agent", server.log_dir).socket_path()
            over_socket = ask(httpx.HTTPTransport(uds=str(sock)), "http://runyard", token, probes)
            admin = ask(None, server.url, server.token or "", probes[2:6])
            (server.workspace / "agent" / "session-state" / own / "go").touch()
            assert wait_run(client, run["id"])["state"] == "succeeded"
            ended = ask(None, service.url, token, probes[:2])
            pod_side = json.loads(client.get(f"/runs/{run['id']}/files/probes.json").content)
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
    # its own session's jobs and records; other sessions as missing; no admin routes
    assert over_tcp == [200, 200, 404, 404, 404, 403, 403, 403, 401], over_tcp
    assert over_socket[:-1] == over_tcp[:-1]  # /metrics is not served on the socket at all
    assert admin == [200, 200, 200, 200]  # the same requests are not refused as such
    assert ended == [401, 401]  # the token ends with its run
    # the pod itself, over the Service: the same answers
    seen = [result["value"][0] for result in pod_side["results"]]
    assert seen == [200, 404], pod_side["results"]
