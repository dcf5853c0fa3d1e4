"""The pytest plugin ``scripts/test.py`` loads (``-p pytest_suite``).

- Tests carrying a marker that ``RUNYARD_TEST_SKIP_MARKERS`` (JSON: marker -> reason) names
  are skipped with that reason, so ``--no-system`` says why each one did not run.
- At the end, the ten test files that took longest (setup, call and teardown of their
  tests added up, as ``--durations`` counts them) are listed with their seconds.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pytest

SLOWEST = 10
_seconds: Counter[str] = Counter()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons: dict[str, str] = json.loads(os.environ.get("RUNYARD_TEST_SKIP_MARKERS") or "{}")
    for item in items:
        for marker, reason in reasons.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _seconds:
        return
    terminalreporter.section(f"slowest {SLOWEST} test files")
    for path, seconds in _seconds.most_common(SLOWEST):
        terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
    terminalreporter.write_line(f"{sum(_seconds.values()):8.1f}s  in all ({len(_seconds)} files)")
