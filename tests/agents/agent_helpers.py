"""Helpers for driving an in-process AgentService in tests."""

from __future__ import annotations

import json
import time
from typing import Any

from runyard.agents.catalog import ReceivedUpload
from runyard.agents.models import Artifact, Run
from runyard.agents.runs import RunRequest
from runyard.api.agentservice import AgentService


def add_artifact(
    service: AgentService, session_id: str, data: bytes, name: str = "prices.csv", rel: str = ""
) -> Artifact:
    fields = {"sessionId": session_id, "relativePath": rel}
    sink = service.catalog.open_upload(fields, None)
    sink.add(data)
    sink.finish()
    return service.catalog.finish_upload(ReceivedUpload(fields, name, "text/csv", sink), None)


def start(service: AgentService, session_id: str, script: str, **extra: Any) -> Run:
    return service.runs.create(RunRequest(session_id, script, package="probe", **extra))


def wait_done(service: AgentService, run_id: str, timeout: float = 30.0) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = service.runs.run(run_id)
        if run.state.terminal:
            return run
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish: {service.runs.run(run_id)}")


def probes(service: AgentService, run_id: str) -> dict[str, Any]:
    path = service.layout.run_subdir(run_id, "out") / "probes.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def results(service: AgentService, run_id: str) -> list[dict[str, Any]]:
    """What each probe command of the run found, in order."""
    return probes(service, run_id)["results"]  # type: ignore[no-any-return]
