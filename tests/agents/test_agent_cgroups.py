"""An agent run's cgroup left behind after its end was recorded (a server killed between the
two) goes at the next server start; a young one no record explains stays. In-process
services on tmp_path, a real run, the machine's real cgroups."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from agent_helpers import wait_done
from agent_support import agent_settings

from runyard.agents.runs import RunRequest
from runyard.api.services import Services
from runyard.executors.base import Limits
from runyard.executors.cgroups import detect_host
from runyard.executors.containment import AGENT_PREFIX, agent_cgroup_name
from runyard.wire import TaskState

HOST = detect_host()
pytestmark = pytest.mark.skipif(HOST is None, reason="no writable cgroup here")


def started(settings) -> Services:  # type: ignore[no-untyped-def]
    services = Services.build(settings)
    services.start()
    return services


def test_a_start_removes_the_cgroup_of_an_agent_run_whose_end_is_recorded(tmp_path: Path):
    assert HOST is not None
    settings = agent_settings(tmp_path, "none")
    first = started(settings)
    try:
        assert first.agents is not None
        session = first.agents.catalog.create_session("ended")
        run = first.agents.runs.create(RunRequest(session.id, "alloc 1", package="limits_probe"))
        assert wait_done(first.agents, run.id).state == TaskState.SUCCEEDED
    finally:
        first.stop()
    left = HOST.create(agent_cgroup_name(run.id), Limits())  # as a kill after the end leaves it
    stranger = HOST.create(f"{AGENT_PREFIX}{uuid.uuid4().hex}", Limits())  # no record of ours
    second = started(settings)
    try:
        deadline = time.monotonic() + 10
        while left.exists():
            assert time.monotonic() < deadline, "the ended run's cgroup stayed"
            time.sleep(0.05)
        assert stranger.exists()
    finally:
        second.stop()
        for group in (left, stranger):
            group.kill()
            group.remove()
