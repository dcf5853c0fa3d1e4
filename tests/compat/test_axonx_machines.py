"""``machine_status`` and ``list_machines`` driven by the real AxonX 0.2.2 CLI and client
against a real runyard server with auth on; every answer validates against AxonX's own
machine models (``axonx.steps.machine.contracts``), imported in AxonX's venv."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess, start_server

TIMEOUT = 2.0
VALIDATE = """
import json, sys
from pydantic import TypeAdapter
from axonx.steps.machine.contracts import MachineHealth, MachineInfo
kind, answer = sys.argv[1], json.loads(sys.stdin.read())
model = MachineInfo if kind == "status" else TypeAdapter(list[MachineHealth])
valid = model.model_validate(answer) if kind == "status" else model.validate_python(answer)
print(json.dumps(TypeAdapter(type(valid)).dump_python(valid, mode="json")))
"""

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)


def axonx_validates(kind: str, answer: Any) -> Any:
    """``answer`` validated by AxonX's model for ``kind`` in its venv, dumped back."""
    reply = subprocess.run(
        [str(axonx_venv() / "bin" / "python"), "-c", VALIDATE, kind],
        input=json.dumps(answer), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert reply.returncode == 0, reply.stderr
    return json.loads(reply.stdout)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A live runyard, a closed port and a listener that never answers."""
    live = start_server(tmp_path_factory.mktemp("axonx-live"), token="live-secret")
    silent = socket.create_server(("127.0.0.1", 0))
    with socket.create_server(("127.0.0.1", 0)) as probe:
        closed = probe.getsockname()[1]
    try:
        yield {
            "live": {"url": live.url, "token": "live-secret"},
            "dead": {"url": f"http://127.0.0.1:{closed}", "token": "x"},
            "silent": {"url": f"http://127.0.0.1:{silent.getsockname()[1]}"},
        }
    finally:
        silent.close()
        live.stop()


@pytest.fixture(scope="module")
def srv(
    tmp_path_factory: pytest.TempPathFactory, targets: dict[str, Any]
) -> Iterator[ServerProcess]:
    config = {"targets": targets, "machine_check_timeout_seconds": TIMEOUT}
    proc = start_server(tmp_path_factory.mktemp("axonx-srv"), config=config)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def axonx(srv: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), srv, tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


def test_machine_status_validates_with_axonx_models(axonx: AxonX) -> None:
    answer = axonx.ok("machine_status")["answer"]
    assert axonx_validates("status", answer) == answer
    assert answer["axonx"]["version"] and answer["cpu"]["total_cores"] >= 1
    assert answer["gpus"] == []  # no GPU here: an empty list, not an error
    via_client = axonx.client("run_job", name="machine_status", arguments={})
    assert via_client["success"] is True
    assert axonx_validates("status", via_client["answer"])["memory"]["total_bytes"] > 0
    streamed = axonx.stream("machine_status")  # one result event, validated by the CLI
    assert [event["kind"] for event in streamed] == ["result"]
    assert axonx_validates("status", streamed[0]["answer"])["gpus"] == []


def test_list_machines_reports_the_live_target_and_the_unreachable_ones(
    axonx: AxonX, targets: dict[str, Any]
) -> None:
    started = time.monotonic()
    answer = axonx.ok("list_machines")["answer"]
    took = time.monotonic() - started
    assert axonx_validates("health", answer) == answer
    health = {row["address"]: row["healthy"] for row in answer}
    assert health == {
        targets["live"]["url"]: True,
        targets["dead"]["url"]: False,
        targets["silent"]["url"]: False,
    }
    assert took < TIMEOUT + 3, took  # the silent one is given up on after the timeout


def test_both_jobs_are_in_help_with_their_schemas(axonx: AxonX) -> None:
    listed = axonx.ok("help")["answer"]["jobs"]
    assert {"machine_status", "list_machines"} <= {job["name"] for job in listed}
    info = axonx.ok("help", "--job", "list_machines")["answer"]["job"]
    assert info["output_schema"]["type"] == "array"
    assert set(info["output_schema"]["items"]["$ref"].split("/")[-1:]) == {"MachineHealth"}
