"""Constants and settings shared by the agent-run tests (imported by name, not via conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runyard.config import Settings
from runyard.executors.sandbox import find_bwrap, probe_bwrap

PACKAGES = Path(__file__).parent / "packages"
BWRAP_PROBLEM = probe_bwrap(find_bwrap())
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
MODES = [pytest.param("bwrap", marks=[pytest.mark.sandbox, needs_bwrap]), "none"]


def agent_settings(root: Path, mode: str, **extra: object) -> Settings:
    values: dict[str, object] = {
        "workspace_dir": root / "ws",
        "log_dir": root / "logs",
        "agent_packages_dir": PACKAGES,
        "agent_sandbox": mode,
        "cancel_grace_seconds": 1.0,
    }
    values.update(extra)
    return Settings(**values)
