"""``scripts/test.py``: ``--no-system`` skips the tests that need a system package, each
with its reason (never silently), and every run ends with the slowest test files."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).parents[2] / "scripts" / "test.py"

SAMPLE = """
import time

import pytest


@pytest.mark.sandbox
def test_in_a_sandbox():
    pass


@pytest.mark.browser
def test_in_chromium():
    pass


def test_plain():
    time.sleep(0.3)
"""

INI = """[pytest]
markers =
    sandbox: needs bubblewrap
    browser: needs chromium
    openssl: needs openssl
    strace: needs strace
"""


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runyard_scripts_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def run_sample(tmp_path: Path, no_system: bool) -> str:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    command, env = load_script().pytest_command(
        Path(sys.executable), ["-n", "0", "-ra", "-p", "no:cacheprovider"], no_system
    )
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_no_system_skips_with_the_package_and_the_reason(tmp_path: Path) -> None:
    out = run_sample(tmp_path, no_system=True)
    assert "1 passed, 2 skipped" in out
    assert (
        "SKIPPED [1] test_sample.py:7: needs bubblewrap (agent runs and run-token tasks in a "
        "sandbox); --no-system installs no system package"
    ) in out
    assert "SKIPPED [1] test_sample.py:12: needs chromium" in out


def test_without_no_system_nothing_is_skipped_and_the_slowest_files_are_listed(
    tmp_path: Path,
) -> None:
    out = run_sample(tmp_path, no_system=False)
    assert "3 passed" in out and "skipped" not in out
    section = out.split("slowest 10 test files", 1)[1]
    found = re.search(r"^ *([0-9.]+)s  test_sample\.py$", section, re.M)
    assert found is not None and float(found.group(1)) >= 0.3, section
