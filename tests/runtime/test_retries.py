"""A submit's ``retries``: a failed run is run again as a new run of the same task, through
a real server and real workers; every attempt is kept in the task's runs, dependents wait
for the last one, a cancel stops the retries. The tests share one server (each has tasks
of its own names); those that need a server of their own (a restart, a fault, a limit)
are in test_retries_restarts.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from retry_helpers import FLAKY, TOKEN, attempts, finished, flaky, runs, seconds, status

from runyard.client import Client
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server, until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("retries") / "srv", token=TOKEN)
    try:
        yield srv
    finally:
        srv.stop()


def test_a_task_that_fails_twice_succeeds_on_its_third_attempt(
    server: ServerProcess, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    handle = flaky(server, "fetch-thrice", counter, ok=3, retries=3, retry_delay_seconds=0.2)
    # a wait on the first attempt's handle follows the task to its last attempt
    waited = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    final = waited["answer"]
    assert waited["success"] is True and final["state"] == "succeeded", final
    assert final["attempt"] == 3 and final["retries"] == 3 and attempts(counter) == 3
    assert final["retry_of"] == handle["run_id"] and final["run_id"] != handle["run_id"]
    assert "retry_at" not in final and "queued_reason" not in final

    listed = runs(server, handle["task_id"])
    assert [r["state"] for r in listed] == ["succeeded", "failed", "failed"]
    assert [r["attempt"] for r in listed] == [3, 2, 1]
    assert len({r["run_id"] for r in listed}) == 3 and listed[-1]["run_id"] == handle["run_id"]
    for run in listed[1:]:  # the failed attempts keep their end, error and log
        assert run["exit_code"] == 1 and run["error"] and run["finished_at"] and not run["current"]
        log = Workspace(server.workspace, server.log_dir).run_log_path(
            handle["task_id"], run["run_id"]
        )
        assert f"attempt {run['attempt']}" in log.read_text()
    assert listed[1]["finished_at"] < listed[0]["started_at"]
    plain = subprocess.run(
        [sys.executable, "-m", "runyard", "runs", handle["task_id"]],
        env=server.cli_env(), capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert len(plain.strip().splitlines()) == 3 and plain.count("failed") == 2
    assert [line.split("  attempt ")[1][:1] for line in plain.strip().splitlines()] == list("321")


def test_retries_exhausted_fail_the_task_and_then_its_dependents(
    server: ServerProcess, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    up = flaky(server, "doomed", counter, ok=99, retries=1, retry_delay_seconds=2.5)["task_id"]
    down = server.call(
        "submit", task="demo", task_name="below", x=1, y=2, depends_on=up, retries=2,
        retry_delay_seconds=0,
    )  # fmt: skip
    down_id = down["answer"]["task_id"]
    below = server.call("submit", task="demo", task_name="lower", x=1, y=2, depends_on=down_id)
    lower_id = below["answer"]["task_id"]
    until(lambda: status(server, up)["attempt"] == 2)
    time.sleep(1.5)  # the waiting dependent is looked at again within a second
    assert status(server, down_id)["state"] == "queued"  # a retry follows: not failed yet
    final = finished(server, up)
    assert final["state"] == "failed" and final["attempt"] == 2 and attempts(counter) == 2
    ended = finished(server, down_id)
    assert ended["state"] == "failed" and ended["error"].startswith(f"upstream failed: {up}")
    time.sleep(1.0)
    assert attempts(counter) == 2  # no third attempt
    # a dependent that never ran is not retried, whatever its own retries
    assert status(server, down_id)["run_id"] == ended["run_id"] and ended["attempt"] == 1
    assert len(runs(server, down_id)) == 1
    lowest = finished(server, lower_id)  # and its own dependents fail in turn
    assert lowest["state"] == "failed" and lowest["error"].startswith(f"upstream failed: {down_id}")


def test_a_dependent_waits_through_a_retry_and_runs_after_success(
    server: ServerProcess, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    up = flaky(server, "shaky", counter, ok=2, retries=2, retry_delay_seconds=1.5)["task_id"]
    down = server.call("submit", task="demo", task_name="after", x=2, y=3, depends_on=[up])
    down_id = down["answer"]["task_id"]
    until(lambda: status(server, up)["attempt"] == 2)
    assert status(server, down_id)["state"] == "queued"
    final = finished(server, up)
    ended = finished(server, down_id)
    assert final["state"] == "succeeded" and final["attempt"] == 2
    assert ended["state"] == "succeeded" and ended["result"]["result"] == 5
    assert ended["started_at"] > final["finished_at"]


def test_a_cancel_during_a_retry_wait_ends_the_task_with_no_more_attempts(
    server: ServerProcess, tmp_path: Path
) -> None:
    counter = tmp_path / "tries"
    task_id = flaky(server, "stopped", counter, ok=99, retries=5, retry_delay_seconds=2)["task_id"]
    waiting = until(lambda: (s := status(server, task_id))["attempt"] == 2 and s)
    assert server.call("cancel", task_id=task_id)["answer"] is True
    ended = status(server, task_id)
    assert ended["state"] == "cancelled" and ended["attempt"] == 2
    assert "queued_reason" not in ended and ended["started_at"] is None
    time.sleep(max(0.0, seconds(waiting["retry_at"]) - time.time()) + 0.5)  # past its time
    assert attempts(counter) == 1 and status(server, task_id)["state"] == "cancelled"
    assert [r["state"] for r in runs(server, task_id)] == ["cancelled", "failed"]


def test_a_cancelled_attempt_is_not_retried(server: ServerProcess, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    task_id = server.call(
        "submit", task="command", task_name="held", shell=True, retries=3,
        retry_delay_seconds=0, command=f"echo x >> {gate}; sleep 30",
    )["answer"]["task_id"]  # fmt: skip
    until(lambda: status(server, task_id)["state"] == "running" and gate.exists())
    assert server.call("cancel", task_id=task_id)["answer"] is True
    ended = finished(server, task_id)
    time.sleep(1.0)
    assert ended["state"] == "cancelled" and status(server, task_id)["run_id"] == ended["run_id"]
    assert gate.read_text() == "x\n"


@pytest.mark.parametrize(
    "bad",
    [
        {"retries": 21},
        {"retries": -1},
        {"retries": "three"},
        {"retries": 1.5},
        {"retry_delay_seconds": -0.1},
        {"retry_delay_seconds": 3601},
        {"retry_delay_seconds": "soon"},
        {"retries": True},  # not read as 1
        {"retries": "3"},
        {"retry_delay_seconds": True},
    ],
)
def test_retries_out_of_bounds_are_refused_and_nothing_is_made(
    server: ServerProcess, bad: dict[str, Any]
) -> None:
    before = server.call("list_task_ids")["answer"]
    with server.client() as client:
        reply = client.post("/jobs/submit", json={"arguments": {
            "task": "demo", "task_name": "bounded", "x": 1, "y": 2, **bad}})  # fmt: skip
    assert reply.status_code == 422, reply.text
    name = next(iter(bad))
    assert name in reply.text
    assert server.call("list_task_ids")["answer"] == before


def test_what_a_failed_attempt_left_goes_through_its_links_never_beyond(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Attempt 1 leaves links to a folder outside (at the top and deeper down) in its task
    folder: the retry removes the links, and what they point at stays whole."""
    victim, counter = tmp_path / "victim", tmp_path / "tries"
    (victim / "inner").mkdir(parents=True)
    (victim / "keep.txt").write_text("mine")
    (victim / "inner" / "deep.txt").write_text("mine too")
    plant = (
        f"[ -e {counter} ] || {{ ln -s {victim} outside; mkdir nest; ln -s {victim} nest/deeper; "
        f"ln -s {victim}/keep.txt file-link; ln -s {victim}/inner inner-link; }}; "
    )
    task_id = server.call(
        "submit", task="command", task_name="links", shell=True, retries=1,
        retry_delay_seconds=0, command=plant + FLAKY.format(counter=counter, ok=2),
    )["answer"]["task_id"]  # fmt: skip
    final = finished(server, task_id)
    assert final["state"] == "succeeded" and final["attempt"] == 2
    folder = Workspace(server.workspace, server.log_dir).task_dir(task_id)
    assert not {"outside", "nest", "file-link", "inner-link"} & {p.name for p in folder.iterdir()}
    assert (victim / "keep.txt").read_text() == "mine"
    assert (victim / "inner" / "deep.txt").read_text() == "mine too"


def test_the_cli_and_the_client_take_retries(server: ServerProcess, tmp_path: Path) -> None:
    by_cli, by_client = tmp_path / "cli-tries", tmp_path / "client-tries"
    made = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "command", "shell=true",
         f"command={FLAKY.format(counter=by_cli, ok=2)}", "--name", "by-cli",
         "--retries", "2", "--retry-delay", "0.2", "--wait", "--json"],
        env=server.cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert json.loads(made.stdout)["attempt"] == 2 and attempts(by_cli) == 2
    with Client(server.url, server.token) as client:
        handle = client.submit(
            "command", name="by-client", shell=True, retries=2, retry_delay_seconds=0.2,
            command=FLAKY.format(counter=by_client, ok=3),
        )  # fmt: skip
        final = client.wait(handle, timeout=30)
    assert final.state == "succeeded" and final.attempt == 3
    refused = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "demo", "x=1", "y=1", "--retries", "21"],
        env=server.cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0 and "retries" in refused.stderr


def test_a_run_without_retries_is_shaped_as_before(server: ServerProcess) -> None:
    task_id = server.call("submit", task="demo", task_name="plain", x=1, y=1)["answer"]["task_id"]
    final = finished(server, task_id)
    assert not {"attempt", "retries", "retry_delay_seconds", "retry_at", "retry_of"} & set(final)
    raw = json.loads((Workspace(server.workspace, server.log_dir).status_path(task_id)).read_text())
    assert "attempt" not in raw


def test_the_docs_example_runs(server: ServerProcess, tmp_path: Path) -> None:
    """docs/workflows.md, Retries: the shell example, its counter file moved into tmp_path."""
    text = (Path(__file__).parents[2] / "docs" / "workflows.md").read_text()
    section = text.split("\n## Retries\n", 1)[1].split("\n## ", 1)[0]
    script = section.split("```sh\n", 1)[1].split("```", 1)[0]
    counter = tmp_path / "fetch.tries"
    assert "/tmp/fetch.tries" in script
    env = server.cli_env()
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # this venv's runyard
    shown = subprocess.run(
        ["bash", "-e", "-c", script.replace("/tmp/fetch.tries", str(counter))],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    final = json.loads(shown.stdout.split("\n}\n", 1)[0] + "\n}")
    assert final["state"] == "succeeded" and final["attempt"] == 3
    assert counter.read_text().count("try") == 3
    listed = shown.stdout.split("\n}\n", 1)[1].strip().splitlines()
    assert len(listed) == 3 and sum("failed" in line for line in listed) == 2
