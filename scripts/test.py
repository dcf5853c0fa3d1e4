#!/usr/bin/env python3
"""Set up everything the test suite needs on a fresh machine, then run it.

System packages (bubblewrap for sandboxed agent runs, chromium for the Studio's browser
tests, openssl for a test certificate, strace to count a reader's system calls) are
installed with apt-get when missing and we are root; Python packages go into ``.venv``.
Extra arguments are passed to pytest. Without ``-n``, the suite runs in two pytest-xdist
workers, one test file at a time each (``--dist loadfile``), so a file's module-scoped
server starts once: most tests wait on real servers and processes, not on CPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
SYSTEM_PACKAGES = {
    "bwrap": "bubblewrap",
    "chromium": "chromium",
    "openssl": "openssl",
    "strace": "strace",
}
WORKERS = 2


def run(*argv: str | Path) -> None:
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], check=True, cwd=ROOT)


def system_packages() -> None:
    missing = [pkg for cmd, pkg in SYSTEM_PACKAGES.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit(f"missing system packages {missing}: install them (apt-get install -y ...)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env)


def python_packages() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        run(sys.executable, "-m", "venv", VENV)
    run(python, "-m", "pip", "install", "-q", "-e", ".[test]")
    # the research pipeline example is a plugin package of its own, tested end to end
    run(python, "-m", "pip", "install", "-q", "-e", "examples/research")
    return python


def main() -> int:
    system_packages()
    python = python_packages()
    run(python, "-m", "ruff", "check", "src", "tests", "bench")
    args = sys.argv[1:]
    if not any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in args):
        args = ["-n", str(WORKERS), "--dist", "loadfile", *args]
    return subprocess.run([str(python), "-m", "pytest", *args], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
