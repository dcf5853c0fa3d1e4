"""A test agent that tries to exceed its limits; what it managed goes to out/limits.json.

forks COUNT        fork COUNT sleeping children (each lives 60 s at most); record how many
                   forks succeeded, then kill them
alloc MIB          a child allocates and touches MIB MiB; record its exit code
double-fork        leave a grandchild in a session of its own (pid in out/grandchild.pid)
wait-for NAME      wait until state/NAME exists (a file the test creates)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))
FOUND: dict[str, object] = {}


def forks(count: int) -> None:
    children, error = [], ""
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    FOUND["forks"] = {"asked": count, "succeeded": len(children), "error": error}


def alloc(mib: int) -> None:
    code = f"b = bytearray({mib} << 20); print('touched', len(b) >> 20, flush=True)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    FOUND["alloc"] = {"mib": mib, "exit": done.returncode, "stdout": done.stdout.strip()}


def double_fork() -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            (WORKSPACE / "out" / "grandchild.pid").write_text(str(os.getpid()))
            time.sleep(300)
        os._exit(0)
    os.wait()
    path = WORKSPACE / "out" / "grandchild.pid"
    while not path.exists():
        time.sleep(0.01)


def wait_for(name: str) -> None:
    while not (WORKSPACE / "state" / name).exists():
        time.sleep(0.05)


COMMANDS = {
    "forks": lambda arg: forks(int(arg)),
    "alloc": lambda arg: alloc(int(arg)),
    "double-fork": lambda arg: double_fork(),
    "wait-for": wait_for,
}


def main() -> None:
    for line in CONTEXT["userPrompt"].splitlines():
        verb, _, arg = line.strip().partition(" ")
        if verb:
            COMMANDS[verb](arg)
    FOUND["envFacts"] = CONTEXT["envFacts"]
    (WORKSPACE / "out" / "limits.json").write_text(json.dumps(FOUND))
    (WORKSPACE / "out" / "final-answer.md").write_text("done")


if __name__ == "__main__":
    main()
