#!/usr/bin/env python3
"""Set up what the test suite needs, saying what and why before doing it, then run it.

Python packages go into ``.venv`` (runyard with its test extras and the research example,
about 1.3 GB). System packages (bubblewrap for sandboxed agent runs, chromium for the
Studio's browser tests, openssl for a test certificate, strace to count a reader's system
calls) are installed with apt-get when missing and we are root; the plan, with how many
packages apt would add and their download size, is printed first, and asked about when
stdin is a terminal (``--yes`` does not ask). ``--no-system`` installs no system package
and skips, each with its reason, the tests that need one (their pytest markers: see
``SYSTEM``). Other arguments go to pytest. Without ``-n``, the suite runs in two
pytest-xdist workers, one test file at a time each (``--dist loadfile``), so a file's
module-scoped server starts once: most tests wait on real servers and processes, not on
CPU. At the end the slowest ten test files are listed (``scripts/pytest_suite.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VENV_SIZE = "about 1.3 GB"  # pyarrow, playwright's driver, kubernetes, scipy, pandas, ...
WORKERS = 2


@dataclass(frozen=True)
class Need:
    command: str  # found on PATH when the package is there
    package: str  # the Debian package
    marker: str  # the pytest marker of the tests that need it
    why: str


SYSTEM = (
    Need("bwrap", "bubblewrap", "sandbox", "agent runs and run-token tasks in a sandbox"),
    Need("chromium", "chromium", "browser", "the Studio's end-to-end tests in headless Chromium"),
    Need("openssl", "openssl", "openssl", "a self-signed certificate for the TLS client tests"),
    Need("strace", "strace", "strace", "counting the system calls of a record read"),
)


def run(*argv: str | Path) -> None:
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], check=True, cwd=ROOT)


def say(text: str = "") -> None:
    print(text, flush=True)


def missing_system() -> list[Need]:
    return [need for need in SYSTEM if shutil.which(need.command) is None]


def apt_plan(packages: list[str], env: dict[str, str]) -> str:
    """What apt would do for ``packages``, in its own words: the package counts, what it
    downloads and the disk space it takes (``--assume-no`` answers its question, so
    nothing is installed)."""
    asked = subprocess.run(
        ["apt-get", "install", "--assume-no", *packages], capture_output=True, text=True, env=env
    )
    said = asked.stdout + asked.stderr
    wanted = (r"^\d+ upgraded, \d+ newly installed.*$", r"^Need to get .*$", r"^After this .*$")
    found = [m.group(0).strip() for m in (re.search(p, said, re.M) for p in wanted) if m]
    return " ".join(found) or "apt could not say what it would install"


def confirm(assume_yes: bool) -> None:
    if assume_yes or not sys.stdin.isatty():
        return
    answer = input("Go ahead? [Y/n] ").strip().lower()
    if answer not in ("", "y", "yes"):
        sys.exit("nothing installed")


def system_packages(assume_yes: bool) -> None:
    missing = missing_system()
    if not missing:
        say("System packages: all there (" + ", ".join(n.package for n in SYSTEM) + ").")
        return
    say("System packages to install with apt-get (as root):")
    for need in missing:
        say(f"  {need.package:<11} for {need.why}")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        names = " ".join(n.package for n in missing)
        sys.exit(
            f"not root or no apt-get: install them yourself (apt-get install -y {names}),\n"
            "or run with --no-system to skip the tests that need them"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    say("First `apt-get update` (the package lists), then what apt would do:")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    packages = [n.package for n in missing]
    say(f"  apt-get install {' '.join(packages)}: {apt_plan(packages, env)}")
    confirm(assume_yes)
    subprocess.run(["apt-get", "install", "-y", "-q", *packages], check=True, env=env)


def python_packages(assume_yes: bool) -> Path:
    python = VENV / "bin" / "python"
    if python.exists():
        say(f"Python packages: brought up to date in {VENV} (runyard[test], examples/research).")
    else:
        say(f"Python packages: a new venv at {VENV} with runyard and its test extras and the")
        say(f"research example (scikit-learn, pandas), {VENV_SIZE} with the wheels pip fetches.")
        confirm(assume_yes)
        run(sys.executable, "-m", "venv", VENV)
    run(python, "-m", "pip", "install", "-q", "-e", ".[test]")
    # the research pipeline example is a plugin package of its own, tested end to end
    run(python, "-m", "pip", "install", "-q", "-e", "examples/research")
    return python


def skipped_without_system() -> dict[str, str]:
    """Marker -> the reason its tests are skipped under ``--no-system``."""
    return {
        need.marker: f"needs {need.package} ({need.why}); --no-system installs no system package"
        for need in SYSTEM
    }


def pytest_command(python: Path, args: list[str], no_system: bool) -> tuple[list[str], dict]:
    env = dict(os.environ)
    plugins = ["-p", "pytest_suite"]
    paths = [str(ROOT / "scripts"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    if no_system:
        env["RUNYARD_TEST_SKIP_MARKERS"] = json.dumps(skipped_without_system())
    if not any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in args):
        args = ["-n", str(WORKERS), "--dist", "loadfile", *args]
    return [str(python), "-m", "pytest", *plugins, *args], env


def main() -> int:
    args = sys.argv[1:]
    no_system = "--no-system" in args
    assume_yes = "--yes" in args
    args = [arg for arg in args if arg not in ("--no-system", "--yes")]
    if no_system:
        say(
            "--no-system: no apt-get; the tests marked "
            + ", ".join(n.marker for n in SYSTEM)
            + " are skipped, each saying why."
        )
    else:
        system_packages(assume_yes)
    python = python_packages(assume_yes)
    run(python, "-m", "ruff", "check", "src", "tests", "bench")
    command, env = pytest_command(python, args, no_system)
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
