from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import agent_settings

from runyard.api.agentservice import AgentService


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[object]:
    """Build started in-process services on tmp_path; all are stopped at the end."""
    made: list[AgentService] = []

    def make(mode: str = "none", **extra: object) -> AgentService:
        service = AgentService.open(agent_settings(tmp_path, mode, **extra))
        service.start()
        made.append(service)
        return service

    yield make
    for service in made:
        service.stop()
