"""Tasks end to end on Kubernetes without a cluster: a real server → the real ``kubernetes``
client → the fake API server → the test kubelet, which really runs the pod's command (the
runyard worker, ``python -m runyard.runtime.worker``, in bubblewrap with the pod's volumes
at their paths) → the task's records in the shared workspace → the server → the Job API.

Covers success, failure, cancel, a pod that never starts, a server restart in the middle
(adoption by the recorded Job, and a run that ended while no server ran and whose Job is
gone), a pod deleted under a run (a node loss), and the leftover sweeper."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import runyard
from runyard.config import Settings
from runyard.errors import ConfigError, InvalidInput, UnknownTask
from runyard.executors.kubernetes import KubernetesExecutor
from runyard.kubernetes_settings import KubernetesSettings
from runyard.runtime.creation import create_task
from runyard.runtime.kubemarks import forget_mark, mark
from runyard.runtime.kubetasks import KubernetesTasks
from runyard.runtime.liveness import settle
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.events import append_event
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, utcnow
from serverproc import ServerProcess, read_sse, start_server

pytest.importorskip("kubernetes")
pytestmark = pytest.mark.sandbox
sys.path.insert(0, str(Path(__file__).parent.parent / "executors"))
from k8s_cluster import container_of, runs_in, wait_for, write_kubeconfig  # noqa: E402
from k8s_fake_api import FakeKubernetes  # noqa: E402
from k8s_kubelet import Kubelet  # noqa: E402

IMAGE = "registry.example/runyard:1"
# the "image" holds this interpreter, its virtualenv and runyard's source, read-only
IMAGE_PATHS = tuple(sorted({
    str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, Path(runyard.__file__).parents[1])
    if not str(Path(p).resolve()).startswith("/usr")
}))  # fmt: skip




def k8s_settings(config: Path, **extra: Any) -> dict[str, Any]:
    return {"image": IMAGE, "kubeconfig": str(config), "request_timeout_seconds": 5,
            "python": sys.executable, "record_poll_seconds": 0.2,
            "node_selector": {"kubernetes.io/hostname": "test-node"}, **extra}  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKubernetes, Kubelet, Path]]:
    fake = FakeKubernetes().start()
    kubelet = Kubelet(fake, image_paths=IMAGE_PATHS).start()
    yield fake, kubelet, write_kubeconfig(fake, tmp_path / "kubeconfig")
    kubelet.stop()
    fake.stop()


def serve(root: Path, k8s: dict[str, Any], **config: Any) -> ServerProcess:
    values = {"kubernetes": k8s, "task_executors": {"command": "kubernetes"},
              "cancel_grace_seconds": 1.0, **config}  # fmt: skip
    return start_server(root, config=values)


@pytest.fixture(scope="module")
def shared_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FakeKubernetes, Kubelet, Path]]:
    """The cluster of ``server``, for the tests whose runs need no cluster of their own."""
    fake = FakeKubernetes().start()
    kubelet = Kubelet(fake, image_paths=IMAGE_PATHS).start()
    yield fake, kubelet, write_kubeconfig(fake, tmp_path_factory.mktemp("k8s") / "kubeconfig")
    kubelet.stop()
    fake.stop()


@pytest.fixture(scope="module")
def server(
    shared_cluster: tuple[FakeKubernetes, Kubelet, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    proc = serve(tmp_path_factory.mktemp("k8s-server") / "srv", k8s_settings(shared_cluster[2]))
    yield proc
    proc.stop()




def submit(server: ServerProcess, task: str, **arguments: Any) -> dict[str, Any]:
    reply = server.call("submit", task=task, **arguments)
    assert reply["success"], reply
    return reply["answer"]  # type: ignore[no-any-return]


def wait_task(server: ServerProcess, handle: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    reply = server.call("wait_task", timeout=timeout + 10, task_id=handle["task_id"],
                        run_id=handle["run_id"], poll_interval=0.2)  # fmt: skip
    return reply["answer"]  # type: ignore[no-any-return]


def status(server: ServerProcess, task_id: str) -> dict[str, Any]:
    return server.call("status", task_id=task_id)["answer"]  # type: ignore[no-any-return]




def jobs_of(fake: FakeKubernetes, run_id: str) -> list[dict[str, Any]]:
    with fake.cond:
        return [obj for (kind, _, _), obj in fake.objects.items() if kind == "Job"
                and obj["metadata"]["labels"].get("runyard.dev/run-id") == run_id]  # fmt: skip


def test_a_task_runs_as_a_job_and_writes_its_records_in_the_shared_workspace(
    shared_cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = shared_cluster
    handle = submit(server, "demo", x=2, y=3, executor="kubernetes")
    final = wait_task(server, handle)
    assert final["state"] == "succeeded", final
    assert final["result"]["result"] == 5
    container = container_of(kubelet, handle["run_id"])
    assert wait_for(lambda: container.proc.poll() == 0)  # the kubelet ran the worker
    # the Job the server created: the image's Python running the worker, limits set
    job = fake.requests_of("POST", "/jobs")[-1].body
    pod = job["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    assert worker["command"][-3:] == [sys.executable, "-m", "runyard.runtime.worker"]
    assert worker["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}
    assert worker["resources"]["limits"] == {"memory": "2Gi"}
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in worker["volumeMounts"]}
    assert str(server.workspace.resolve()) in mounts and str(server.log_dir.resolve()) in mounts
    # the records, written by the worker in the pod, are the local contract
    task_dir = server.workspace / "base" / handle["task_id"]
    events = [json.loads(line) for line in (task_dir / "events.jsonl").read_text().splitlines()]
    assert any(e.get("kind") == "progress" for e in events)
    assert final["limits"]["enforced_by"] == "kubernetes"
    log = Path(final["log_path"]).read_text()
    assert log.strip(), "the worker's log is in the shared log folder"
    assert fake.logs.get(container.pod, b"") == b""  # not in the pod log
    wait_for(lambda: not jobs_of(fake, handle["run_id"]))  # deleted once the end is recorded
    # streamed over SSE while it runs in its pod: its progress, its log, its result
    streamed = submit(server, "command", command="sh -c 'echo from-the-pod; sleep 1'")
    body = {"arguments": {"task_id": streamed["task_id"], "poll_interval": 0.1}}
    with server.client(timeout=60) as client, client.stream(
        "POST", "/jobs/stream_task/events", json=body
    ) as reply:
        assert reply.status_code == 200
        sse = read_sse(reply.iter_lines())
    kinds = [e["event"] for e in sse]
    assert kinds[-1] == "result" and sse[-1]["data"]["success"] is True, sse[-3:]
    assert "progress" in kinds
    assert "from-the-pod" in "".join(str(e["data"]) for e in sse if e["event"] == "log")
    # a local task on the same server still runs locally
    local = submit(server, "demo", x=1, y=1)
    assert wait_task(server, local)["state"] == "succeeded"
    assert not any(runs_in(c, local["run_id"]) for c in kubelet.containers.values())
    # the CLI chooses it per submit too
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "demo", "x=4", "y=4", "--executor",
         "kubernetes", "--wait", "--json"],
        env=server.cli_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    by_cli = json.loads(done.stdout)
    assert by_cli["state"] == "succeeded" and by_cli["result"]["result"] == 8
    assert by_cli["limits"]["enforced_by"] == "kubernetes"
    # an executor the server does not know: one clear error, nothing submitted
    with server.client() as client:
        reply = client.post("/jobs/submit", json={"arguments": {
            "task": "demo", "x": 1, "y": 1, "executor": "mars"}})  # fmt: skip
    assert reply.status_code in (400, 422), reply.text
    assert "executor" in reply.text
    before = server.call("list_task_ids")["answer"]
    refused = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "demo", "x=1", "y=1", "--executor", "mars"],
        env=server.cli_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == "", refused
    assert "--executor must be local or kubernetes, not 'mars'" in refused.stderr
    assert server.call("list_task_ids")["answer"] == before  # nothing submitted




def test_failure_cancel_and_a_lost_pod(
    shared_cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = shared_cluster
    failing = submit(server, "demo", x=1, y=1, fail=True, executor="kubernetes")
    failed = wait_task(server, failing)
    assert failed["state"] == "failed" and failed["exit_code"] == 1, failed
    assert "fail" in failed["error"].lower()  # the worker's own error, not a pod's exit

    # task_executors sends every `command` task to Kubernetes
    slow = submit(server, "command", command="sleep 60")
    running = container_of(kubelet, slow["run_id"])
    wait_for(lambda: status(server, slow["task_id"])["state"] == "running")
    cancel = server.call("cancel", task_id=slow["task_id"])
    assert cancel["success"] and cancel["answer"] is True, cancel
    cancelled = wait_task(server, slow)
    assert cancelled["state"] == "cancelled", cancelled
    wait_for(lambda: running.proc.poll() is not None, timeout=10)  # the pod's process died

    lost = submit(server, "command", command="sleep 60")
    victim = container_of(kubelet, lost["run_id"])
    wait_for(lambda: status(server, lost["task_id"])["state"] == "running")
    deleted = httpx.delete(f"{fake.url}/api/v1/namespaces/default/pods/{victim.pod}",
                           params={"gracePeriodSeconds": "0"})  # fmt: skip
    assert deleted.status_code == 200  # what a node loss or an eviction does to it
    ended = wait_task(server, lost)
    assert ended["state"] == "failed", ended
    # Kubernetes' reason, kept; or, if the SIGTERM reached the worker before the SIGKILL,
    # its own account (a stop nobody asked for is no cancel)
    assert "Job failed" in ended["error"] or "no cancel requested" in ended["error"], ended
    # the worker records its end before its sandbox has gone: the process ends just after
    wait_for(lambda: victim.proc.poll() is not None, timeout=10)

    # past activeDeadlineSeconds the Job controller deletes the pod: its worker gets a
    # SIGTERM nobody here asked for, and records no cancel
    late = submit(server, "command", command="sleep 60")
    container_of(kubelet, late["run_id"])
    wait_for(lambda: status(server, late["task_id"])["state"] == "running")
    job = jobs_of(fake, late["run_id"])[0]["metadata"]["name"]
    fake.fail_job(job, "DeadlineExceeded", "Job was active longer than specified deadline")
    timed_out = wait_task(server, late)
    assert timed_out["state"] == "failed" and timed_out["exit_code"] == 143, timed_out
    assert "no cancel requested" in timed_out["error"], timed_out["error"]
    events = (server.workspace / "base" / late["task_id"] / "events.jsonl").read_text()
    assert '"cancelled"' not in events  # never announced as cancelled, even for a moment


def test_in_pvc_mode_the_pod_sees_the_workspace_through_the_claim_at_the_same_paths(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> None:
    fake, kubelet, config = cluster
    root = tmp_path / "claim"  # the claim's root, holding the workspace and the logs
    kubelet.claims["runyard-data"] = root
    k8s = {**k8s_settings(config), "volume_mode": "pvc", "pvc_name": "runyard-data",
           "pvc_host_root": str(root)}  # fmt: skip
    del k8s["node_selector"]  # a claim reaches every node: no pinning
    server = serve(root, k8s)
    try:
        handle = submit(server, "demo", x=20, y=22, executor="kubernetes")
        final = wait_task(server, handle)
        assert final["state"] == "succeeded" and final["result"]["result"] == 42, final
    finally:
        server.stop()
    pod = next(r.body for r in fake.requests_of("POST", "/jobs")
               if r.body["metadata"]["labels"]["runyard.dev/run-id"] == handle["run_id"])
    spec = pod["spec"]["template"]["spec"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]
            if "persistentVolumeClaim" in v] == ["runyard-data"]  # fmt: skip
    assert all("hostPath" not in v for v in spec["volumes"]) and "affinity" not in spec
    mounts = {m["mountPath"]: m.get("subPath") for m in spec["containers"][0]["volumeMounts"]}
    ws = str(server.workspace.resolve())
    assert mounts[ws] == "ws" and mounts[str(server.log_dir.resolve())] == "logs"
    assert Path(final["log_path"]).read_text().strip()  # its log, on the claim


def test_a_410_on_the_watch_lists_again_and_the_run_is_still_followed(
    shared_cluster: tuple[FakeKubernetes, Kubelet, Path], server: ServerProcess
) -> None:
    fake, kubelet, _ = shared_cluster
    handle = submit(server, "command", command="sleep 2")
    container_of(kubelet, handle["run_id"])
    wait_for(lambda: status(server, handle["task_id"])["state"] == "running")
    lists = fake.request_counts()[("list", "Job")]
    with fake.cond:  # the history is compacted and the stream breaks: its resume gets 410
        fake.add("ConfigMap", {"metadata": {"name": "elsewhere"}}, datetime.now(UTC))
        fake.expire_watch_history()
        fake.gone_as_http = True
        fake.drop_watches()
    final = wait_task(server, handle)
    assert final["state"] == "succeeded", final
    wait_for(lambda: not jobs_of(fake, handle["run_id"]))  # its end seen, its Job deleted
    wait_for(lambda: fake.request_counts()[("list", "Job")] > lists)  # listed again
    with fake.cond:
        fake.gone_as_http = False


def test_a_pod_that_never_starts_fails_with_the_schedulers_reason(tmp_path: Path) -> None:
    fake = FakeKubernetes().start()  # no kubelet: pods stay Pending
    try:
        config = write_kubeconfig(fake, tmp_path / "kubeconfig")
        server = serve(tmp_path / "srv", k8s_settings(config, start_timeout_seconds=1.5))
        try:
            handle = submit(server, "demo", x=1, y=1, executor="kubernetes")
            job = wait_for(lambda: jobs_of(fake, handle["run_id"]))[0]
            wait_for(lambda: has_pod(fake, job["metadata"]["name"]))
            fake.set_unschedulable(job["metadata"]["name"], "0/3 nodes are available: "
                                   "3 Insufficient memory.")  # fmt: skip
            final = wait_task(server, handle, timeout=30)
            assert final["state"] == "failed", final
            assert "not started within 1.5 s" in final["error"], final["error"]
            assert "Unschedulable" in final["error"] and "Insufficient memory" in final["error"]
            wait_for(lambda: not jobs_of(fake, handle["run_id"]))  # the Job is stopped
        finally:
            server.stop()
    finally:
        fake.stop()


def has_pod(fake: FakeKubernetes, job_name: str) -> bool:
    try:
        return bool(fake.pod_of(job_name))
    except KeyError:
        return False


def test_a_restarted_server_adopts_its_jobs(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> None:
    fake, kubelet, config = cluster
    k8s = k8s_settings(config)
    first = serve(tmp_path / "srv", k8s)
    try:
        long = submit(first, "command", command="sleep 8")
        short = submit(first, "command", command="true")
        container_of(kubelet, long["run_id"])
        wait_for(lambda: status(first, short["task_id"])["state"] == "succeeded")
        wait_for(lambda: status(first, long["task_id"])["state"] == "running")
        quick = submit(first, "command", command="sleep 1")
        ended = submit(first, "command", command="sleep 1")
        for handle in (quick, ended):
            wait_for(lambda h=handle: status(first, h["task_id"])["state"] == "running")
    finally:
        first.stop(keep_runs=True)
    # while no server runs, `quick` and `ended` end (their workers record it); the Job of
    # `quick` goes away (as by its TTL), the Job of `ended` stays
    for handle in (quick, ended):
        path = first.workspace / "base" / handle["task_id"] / "status.json"
        wait_for(lambda p=path: json.loads(p.read_text())["state"] == "succeeded")
    for job in jobs_of(fake, quick["run_id"]):
        name = job["metadata"]["name"]
        httpx.delete(f"{fake.url}/apis/batch/v1/namespaces/default/jobs/{name}",
                     params={"propagationPolicy": "Background"})  # fmt: skip
    assert jobs_of(fake, long["run_id"]), "the long run's Job is still there"

    second = serve(tmp_path / "srv", k8s)
    try:
        final = wait_task(second, long, timeout=30)
        assert final["state"] == "succeeded", final  # followed by its Job, no PID involved
        assert status(second, quick["task_id"])["state"] == "succeeded"  # not "exit 255"
        wait_for(lambda: not jobs_of(fake, long["run_id"]))
        wait_for(lambda: not jobs_of(fake, ended["run_id"]))  # collected at the start
        creates = [r for r in fake.requests_of("POST", "/jobs")
                   if r.body["metadata"]["labels"]["runyard.dev/run-id"] == long["run_id"]]
        assert len(creates) == 1  # adopted, not launched again
    finally:
        second.stop()


def test_the_sweeper_removes_only_this_servers_leftovers(
    cluster: tuple[FakeKubernetes, Kubelet, Path], tmp_path: Path
) -> None:
    fake, _, config = cluster
    root = tmp_path / "srv"
    (root / "ws").mkdir(parents=True)
    (root / "ws" / "kubernetes-instance").write_text("ry-mine\n")
    leftover = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"suspend": True, "template": {
        "spec": {"containers": [{"name": "worker", "image": IMAGE}], "restartPolicy": "Never"}}}}
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    for name, instance in (("runyard-mine", "ry-mine"), ("runyard-theirs", "ry-theirs")):
        body = json.loads(json.dumps(leftover))
        body["metadata"] = {"name": name, "labels": {
            "app.kubernetes.io/managed-by": "runyard", "runyard.dev/run-id": name,
            "runyard.dev/instance": instance}}
        fake.add("Job", body, an_hour_ago)  # left by a launch that died an hour ago
    # suspended Jobs younger than a minute are launches under way: never swept
    server = serve(root, k8s_settings(config, sweep_min_age_seconds=60,
                                      sweep_interval_seconds=0.5), task_executor="kubernetes")
    try:
        wait_for(lambda: "Job" not in fake.kinds_named("runyard-mine"))
        assert "Job" in fake.kinds_named("runyard-theirs")
        handle = submit(server, "demo", x=1, y=2)  # task_executor: every task on Kubernetes
        assert wait_task(server, handle)["state"] == "succeeded"
        assert any(r.body["metadata"]["labels"]["runyard.dev/run-id"] == handle["run_id"]
                   for r in fake.requests_of("POST", "/jobs"))  # it ran as a Job  # fmt: skip
        assert "Job" in fake.kinds_named("runyard-theirs")  # still, after many rounds
    finally:
        server.stop()


# --- without a cluster: what readers, submits and settings do with Kubernetes runs --------


def test_a_reader_without_a_server_leaves_a_kubernetes_run_alone(
    workspace: Workspace, registry: TaskRegistry
) -> None:
    queued = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    running = queued.model_copy(update={"state": TaskState.RUNNING, "started_at": utcnow()})
    workspace.write_status(running)
    mark(workspace, queued.task_id, "0" * 32)  # an earlier run's mark does not count...
    assert settle(workspace, running).state is TaskState.FAILED
    workspace.write_status(running)
    mark(workspace, queued.task_id, queued.run_id)  # ...this run's does: its worker is a pod
    assert settle(workspace, running).state is TaskState.RUNNING  # no lock here, not dead
    assert workspace.read_status(queued.task_id) == running
    forget_mark(workspace, queued.task_id)
    assert settle(workspace, running).state is TaskState.FAILED  # a local run: dead


def test_a_submit_refuses_an_executor_it_cannot_use_and_writes_nothing(
    settings: Settings, workspace: Workspace, registry: TaskRegistry
) -> None:
    supervisor = Supervisor(settings, workspace, registry)
    inputs = {"x": 1, "y": 2}
    with pytest.raises(InvalidInput, match="not configured"):
        supervisor.submit("demo", inputs, executor="kubernetes")
    with pytest.raises(InvalidInput, match="one of local, kubernetes"):
        supervisor.submit("demo", inputs, executor="mars")
    with pytest.raises(UnknownTask):
        supervisor.submit("nosuch", inputs, executor="kubernetes")
    k8s = settings.model_copy(update={"kubernetes": KubernetesSettings(image="i")})
    by_run = {"session_id": "s1", "run_id": "r1"}
    with pytest.raises(InvalidInput, match="sandbox"):  # an agent's task stays in its sandbox
        Supervisor(k8s, workspace, registry).submit("demo", inputs, by_run, None, "kubernetes")
    with pytest.raises(ConfigError, match="node"):  # hostPath mode, no node to pin pods to
        Supervisor(k8s, workspace, registry).submit("demo", inputs, executor="kubernetes")
    assert not list(workspace.root.rglob("status.json"))
    assert not (workspace.root / ".kubernetes").exists()


def test_kubernetes_task_settings_need_a_kubernetes_block() -> None:
    for given in ({"task_executor": "kubernetes"}, {"task_executors": {"train": "kubernetes"}}):
        with pytest.raises(ConfigError, match="kubernetes"):
            Settings.load(given)
    with pytest.raises(ConfigError, match="task_executor"):
        Settings.load({"task_executor": "mars"})
    assert Settings.load({"task_executors": {"train": "local"}}).task_executors == {
        "train": "local"
    }


class Recorder:
    """The supervisor's side of :class:`KubernetesTasks`, recording what it is told."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.announced: list[tuple[str, set[str] | None]] = []

    def record_end(self, task_id: str, run_id: str, info: Any, cancelled: bool,
                   error: str | None) -> Any:  # fmt: skip
        return self.workspace.read_status(task_id)

    def announce(self, task_id: str, names: set[str] | None = None) -> None:
        self.announced.append((task_id, names))

    def run_ended(self, task_id: str) -> None:
        pass


def test_a_running_tasks_records_are_read_without_inotify(
    tmp_path: Path, workspace: Workspace, registry: TaskRegistry
) -> None:
    """A worker on another node raises no inotify event here: its writes are found by
    reading the records while the run goes on (nothing here watches the folder)."""
    fake = FakeKubernetes().start()  # no kubelet: the "other node" is this test
    settings = Settings(
        workspace_dir=workspace.root, log_dir=workspace.log_dir,
        kubernetes=k8s_settings(write_kubeconfig(fake, tmp_path / "kubeconfig")),
    )  # fmt: skip
    executor = KubernetesExecutor.from_settings(settings)
    host = Recorder(workspace)
    kube = KubernetesTasks(settings, workspace, registry, lambda: executor, host)
    try:
        status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
        kube.queue_mark(status)
        kube.launch(status)
        wait_for(lambda: jobs_of(fake, status.run_id))
        wait_for(lambda: host.announced)  # the first reading
        host.announced.clear()
        append_event(workspace.events_path(status.task_id), {"kind": "progress", "at": utcnow()})
        wait_for(lambda: (status.task_id, {"events.jsonl"}) in host.announced, timeout=5)
        running = status.model_copy(update={"state": TaskState.RUNNING, "started_at": utcnow()})
        workspace.write_status(running)
        wait_for(lambda: (status.task_id, {"status.json"}) in host.announced, timeout=5)
        assert kube.tracks(status.run_id) and kube.count() == 1
    finally:
        kube.close()
        executor.close()
        fake.stop()
