"""GPUs as a resource of local runs, through a real server and real workers: two "GPUs" from
the ``gpus`` setting, tasks asking one each (gpu_plugin), gates the test opens to end them.

At most two run at once, never on the same device; the others wait queued, saying why,
while a task that needs no GPU runs past them; an ask for more GPUs than exist is refused
at submit with nothing made; a restart keeps the grants of the runs it adopts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_plugin import install
from pydantic import ValidationError

from runyard.api.job_args import SubmitArgs
from runyard.config import Settings
from runyard.errors import ResourcesRefused
from runyard.runtime.resources import resolve_resources
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.base import Task, describe
from serverproc import ServerProcess, start_server, until

TOKEN = "gpu-secret"
CONFIG = {
    "gpus": [0, 1],
    "max_concurrent_tasks": 8,
    "task_resources": {"layered-hold": {"memory_mb": 4096}},
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpu-site")
    install(folder)
    return folder


@pytest.fixture(scope="module")
def server(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(
        tmp_path_factory.mktemp("gpus") / "srv", token=TOKEN, config=CONFIG,
        env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    try:
        yield srv
    finally:
        srv.stop()


def submit(server: ServerProcess, task: str, gate: Path, **arguments: Any) -> str:
    reply = server.call("submit", task=task, gate=str(gate), **arguments)
    assert reply["success"] is True, reply
    return str(reply["answer"]["task_id"])


def status(server: ServerProcess, task_id: str) -> dict[str, Any]:
    return server.call("status", task_id=task_id)["answer"]  # type: ignore[no-any-return]


def states(server: ServerProcess, ids: list[str]) -> dict[str, dict[str, Any]]:
    return {task_id: status(server, task_id) for task_id in ids}


def settled(server: ServerProcess, ids: list[str], running: int) -> dict[str, dict[str, Any]]:
    """The statuses once ``running`` of ``ids`` run and the rest wait for a GPU."""

    def look() -> dict[str, dict[str, Any]] | None:
        found = states(server, ids)
        live = [s for s in found.values() if s["state"] == "running"]
        waiting = [s for s in found.values() if "GPU" in (s.get("queued_reason") or "")]
        return found if len(live) == running and len(waiting) == len(ids) - running else None

    return until(look, 30)  # type: ignore[no-any-return]


def finished(server: ServerProcess, ids: list[str]) -> dict[str, dict[str, Any]]:
    def look() -> dict[str, dict[str, Any]] | None:
        found = states(server, ids)
        return found if all(s["state"] == "succeeded" for s in found.values()) else None

    return until(look, 60)  # type: ignore[no-any-return]


def devices(found: dict[str, Any]) -> list[int]:
    return list(found.get("resources", {}).get("gpu_devices", []))


def assert_never_shared(ended: list[dict[str, Any]], gpus: int) -> None:
    """Each run saw only its granted device; no two overlapping runs saw the same one,
    and no more than ``gpus`` ran at once."""
    spans = []
    for found in ended:
        result = found["result"]
        assert result["visible"] == ",".join(map(str, devices(found))), found
        assert result["order"] == "PCI_BUS_ID"  # indices as NVML counts them
        assert len(devices(found)) == 1, found
        spans.append((result["started"], result["ended"], result["visible"]))
    for i, (start, end, device) in enumerate(spans):
        overlapping = [s for s in spans[i + 1 :] if s[0] < end and start < s[1]]
        assert all(other[2] != device for other in overlapping), spans
        at_once = sum(1 for s in spans if s[0] <= start < s[1])
        assert at_once <= gpus, spans


def test_four_one_gpu_runs_share_two_gpus_and_a_plain_run_passes_them(
    server: ServerProcess, tmp_path: Path
) -> None:
    gates = [tmp_path / f"gate{i}" for i in range(4)]
    ids = [submit(server, "gpu-hold", gate) for gate in gates]
    found = settled(server, ids, running=2)
    running = [task_id for task_id in ids if found[task_id]["state"] == "running"]
    assert sorted(devices(found[t])[0] for t in running) == [0, 1], found
    waiting = [found[t] for t in ids if t not in running]
    assert all(w["queued_reason"] == "waiting for 1 free GPU of 2" for w in waiting), waiting

    # a run that needs no GPU is not held up behind the waiters, and sees no GPU at all
    open_gate = tmp_path / "plain-gate"
    open_gate.touch()
    plain = submit(server, "plain-hold", open_gate)
    ended = finished(server, [plain])[plain]
    assert ended["result"]["visible"] == "" and "resources" not in ended, ended
    assert all(
        s["state"] == "queued"
        for s in states(server, [t for t in ids if t not in running]).values()
    )

    gates[ids.index(running[0])].touch()  # one ends: one waiter gets its device
    freed = devices(found[running[0]])
    found = settled(server, [t for t in ids if t != running[0]], running=2)
    started = [t for t in ids if t not in running and found[t]["state"] == "running"]
    assert len(started) == 1 and devices(found[started[0]]) == freed, found
    for gate in gates:
        gate.touch()
    assert_never_shared(list(finished(server, ids).values()), gpus=2)


@pytest.mark.parametrize(
    "resources",
    [
        {"gpus": 3},  # more than the two the server controls
        {"gpus": 65},
        {"gpus": -1},
        {"gpus": True},  # not read as 1
        {"gpus": "1"},
        {"gpus": 1.5},
        {"cpus": 0},
        {"memory_mb": 8},
        {"gpu_type": "A100 80GB"},  # not a label value
        {"gpus": 0, "gpu_type": "A100"},  # a type without a GPU
        {"disk_mb": 10},  # no such field
        "two",
        [1],
    ],
)
def test_a_bad_or_too_large_resources_ask_is_refused_and_nothing_is_made(
    server: ServerProcess, tmp_path: Path, resources: object
) -> None:
    before = server.call("list_task_ids")["answer"]
    with server.client() as client:
        reply = client.post("/jobs/submit", json={"arguments": {
            "task": "gpu-hold", "task_name": "toomuch", "gate": str(tmp_path / "g"),
            "resources": resources}})  # fmt: skip
    assert reply.status_code == 422, reply.text
    assert "resources" in reply.text or "gpus" in reply.text
    assert server.call("list_task_ids")["answer"] == before


def test_three_gpus_asked_of_two_names_both_numbers(server: ServerProcess, tmp_path: Path) -> None:
    with server.client() as client:
        reply = client.post("/jobs/submit", json={"arguments": {
            "task": "gpu-hold", "gate": str(tmp_path / "g"), "resources": {"gpus": 3}}})  # fmt: skip
    assert reply.status_code == 422
    assert reply.json()["detail"] == (
        "resources.gpus 3 is more than the 2 GPUs this server controls (the gpus setting)"
    )


def test_a_submit_wins_over_the_setting_which_wins_over_the_class(
    server: ServerProcess, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    task_id = submit(server, "layered-hold", gate, resources={"cpus": 0.5})
    ended = finished(server, [task_id])[task_id]
    resources = ended["resources"]
    assert {k: v for k, v in resources.items() if k != "gpu_devices"} == {
        "cpus": 0.5, "memory_mb": 4096, "gpus": 1,
    }, ended  # fmt: skip
    assert ended["result"]["visible"] == str(resources["gpu_devices"][0])
    limits = ended["limits"]  # the asks are the run's cgroup (or setrlimit) limits
    assert limits["cpu"] == 0.5 and limits["memory_mb"] == 4096, limits


def test_a_restart_keeps_the_grants_of_the_runs_it_adopts(site: Path, tmp_path: Path) -> None:
    root = tmp_path / "srv"
    env = {"PYTHONPATH": str(site)}
    gates = [tmp_path / f"gate{i}" for i in range(3)]
    first = start_server(root, token=TOKEN, config=CONFIG, env=env)
    try:
        ids = [submit(first, "gpu-hold", gate) for gate in gates]
        before = settled(first, ids, running=2)
    finally:
        first.stop(signal.SIGKILL, keep_runs=True)
    second = start_server(root, token=TOKEN, config=CONFIG, env=env)
    try:
        running = [t for t in ids if before[t]["state"] == "running"]
        waiter = next(t for t in ids if t not in running)
        after = settled(second, ids, running=2)  # the same two: nothing granted twice
        assert [t for t in ids if after[t]["state"] == "running"] == running, after
        assert status(second, waiter)["state"] == "queued"
        gates[ids.index(running[1])].touch()
        freed = devices(before[running[1]])
        until(lambda: status(second, waiter)["state"] == "running" or None, 30)
        assert devices(status(second, waiter)) == freed
        for gate in gates:
            gate.touch()
        assert_never_shared(list(finished(second, ids).values()), gpus=2)
    finally:
        second.stop()


@pytest.mark.parametrize(
    ("asked", "refusal"),
    [
        ({"cpus": 2.5}, "resources.cpus 2.5 is more than task_limits.cpu 2"),
        ({"memory_mb": 2049}, "resources.memory_mb 2049 is more than task_limits.memory_mb 2048"),
    ],
)
def test_task_limits_stay_the_ceiling_of_a_local_ask(asked: dict[str, Any], refusal: str) -> None:
    settings = Settings(task_limits={"cpu": 2, "memory_mb": 2048}, gpus=[])
    with pytest.raises(ResourcesRefused) as refused:
        resolve_resources(settings, "demo", None, asked, gpu_count=0)
    assert str(refused.value) == refusal
    # at the ceiling it is granted; on Kubernetes (no local GPU count) the ceiling is not ours
    at_ceiling = {"cpus": 2.0, "memory_mb": 2048}
    assert resolve_resources(settings, "demo", None, at_ceiling, 0).record() == at_ceiling
    assert resolve_resources(settings, "demo", None, asked, None).record() == asked


def test_the_submit_schema_that_mcp_serves_carries_resources() -> None:
    """MCP's submit tool takes its input schema from the submit job's arguments."""
    schema = SubmitArgs.model_json_schema()
    fields = schema["$defs"]["Resources"]["properties"]
    assert set(fields) == {"cpus", "memory_mb", "gpus", "gpu_type"}
    assert (fields["gpus"]["minimum"], fields["gpus"]["maximum"]) == (0, 64)
    assert schema["$defs"]["Resources"]["additionalProperties"] is False


def test_the_cli_asks_for_gpus_with_one_option(server: ServerProcess, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "plain-hold", f"gate={gate}", "--gpus", "1",
         "--wait", "--json"],
        env=server.cli_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ended = json.loads(done.stdout)
    assert ended["resources"]["gpus"] == 1
    assert ended["result"]["visible"] == str(ended["resources"]["gpu_devices"][0])
    before = server.call("list_task_ids")["answer"]
    refused = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "plain-hold", f"gate={gate}", "--gpus", "3"],
        env=server.cli_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode != 0 and refused.stdout == ""
    assert "resources.gpus 3 is more than the 2 GPUs" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert server.call("list_task_ids")["answer"] == before


@pytest.mark.parametrize("bad", [{"gpus": 65}, {"gpus": "1"}, {"vram_gb": 80}, "one GPU"])
def test_a_task_class_with_bad_resources_does_not_load(bad: object) -> None:
    class Greedy(Task):
        """Asks for what cannot be."""

        resources = bad  # type: ignore[assignment]

        def run(self, inputs: Any, run: Any) -> Any:
            raise AssertionError("never run")

    with pytest.raises(TypeError, match="Task greedy: resources"):
        describe(Greedy, "greedy", None)


def test_bad_resource_settings_stop_the_settings_load() -> None:
    for values in ({"gpus": [0, 0]}, {"gpus": [-1]}, {"task_resources": {"t": {"gpus": 99}}}):
        with pytest.raises(ValidationError):
            Settings(**values)


def test_a_task_an_agent_run_submits_may_not_ask_for_a_gpu(
    make_supervisor: Callable[..., Supervisor], tmp_path: Path
) -> None:
    """Its sandbox's /dev holds no GPU device: a grant would hold a GPU it cannot use."""
    supervisor = make_supervisor(start=False, gpus=[0, 1])
    by_run = {"session_id": "s1", "run_id": "r1"}
    with pytest.raises(ResourcesRefused, match="runs in its sandbox, which has no GPU"):
        supervisor.submit("demo", {"x": 1, "y": 2}, by_run, resources={"gpus": 1})
    assert not list(supervisor.workspace.type_dir("base").iterdir())  # nothing made
