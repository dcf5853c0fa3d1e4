"""How fast the ``runyard`` command starts, next to ``python -c 'import typer'``.

Prints medians over ``--runs`` rounds (each round runs every command once, in turn, so a
busy machine slows all of them alike) of wall time and CPU time (user + system of the
child, steadier than wall time on a shared machine), and each one's ratio to the typer
baseline, then one line per target with both ratios (wall and CPU medians): ``--help``
within 2x and ``ls`` over HTTP within 3x; this is a measurement, never a gate.

    python bench/bench_cli_start.py --runs 15

``ls`` is measured on the files (a temporary workspace with a few finished tasks) and over
HTTP (a server this script starts on 127.0.0.1 on that workspace, then stops).

Every command loads compiled modules, as typer's installed ones are: the children write
and read their bytecode in a temporary cache (``PYTHONPYCACHEPREFIX``, with
``PYTHONDONTWRITEBYTECODE`` left out) and each command runs once untimed first. Otherwise a
source tree whose bytecode is stale, in an environment that turns writing it off, has its
edited modules compiled again at every run (all that ``ls`` loads: 85 ms here), which no
installed runyard does.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serverproc import start_server  # noqa: E402

PYTHON = sys.executable
RUNYARD = shutil.which("runyard", path=str(Path(PYTHON).parent)) or "runyard"


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one run; a failing command stops the bench."""
    cpu, wall = child_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - wall, child_cpu() - cpu
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return wall, cpu


def make_workspace(root: Path, tasks: int, env: dict[str, str]) -> None:
    for index in range(tasks):
        command = [RUNYARD, "run", "demo", f"x={index}", "y=1", "--name", f"bench-{index}"]
        subprocess.run(command, cwd=root, env=env, check=True, capture_output=True)


def compiled(env: dict[str, str], cache: Path) -> dict[str, str]:
    """``env`` with the bytecode of every module kept in ``cache``."""
    kept = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**kept, "PYTHONPYCACHEPREFIX": str(cache)}


def measure(
    commands: dict[str, tuple[list[str], dict[str, str]]], cwd: Path, runs: int
) -> dict[str, tuple[float, float]]:
    for command, env in commands.values():  # untimed: writes the bytecode of each one
        timed(command, cwd, env)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (command, env) in commands.items():
            samples[name].append(timed(command, cwd, env))
    return {
        name: (statistics.median(w for w, _ in got), statistics.median(c for _, c in got))
        for name, got in samples.items()
    }


def target_line(name: str, results: dict[str, tuple[float, float]], target: float) -> str:
    """One target's verdict: the wall and CPU medians as ratios to the typer baseline
    measured beside it."""
    key = next(k for k in results if k.startswith(f"runyard {name}"))
    (wall0, cpu0), (wall, cpu) = results["import typer"], results[key]
    verdict = "within" if wall / wall0 <= target else "OVER"
    return (f"runyard {name}: {wall / wall0:.2f}x typer wall, {cpu / cpu0:.2f}x cpu "
            f"(target <= {target:g}x: {verdict})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tasks", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="runyard-bench-cli-") as tmp:
        root = Path(tmp)
        cache = root / "bytecode"
        base = compiled({k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")},
                        cache)  # fmt: skip
        make_workspace(root, args.tasks, base)
        typer = ([PYTHON, "-c", "import typer"], base)
        # no server yet: ls reads the files (with one running, it would ask the server)
        files = measure(
            {"import typer": typer, "runyard --help": ([RUNYARD, "--help"], base),
             "runyard ls (files)": ([RUNYARD, "ls"], base)},
            root, args.runs,
        )  # fmt: skip
        server = start_server(root / "srv", workspace=root / ".runyard")
        try:
            http = measure(
                {"import typer": typer,
                 "runyard ls (http)": ([RUNYARD, "ls"], compiled(server.cli_env(), cache))},
                root, args.runs,
            )  # fmt: skip
        finally:
            server.stop()
    print(f"{'command':<22} {'wall ms':>8} {'x typer':>8} {'cpu ms':>8} {'x typer':>8}")
    for results in (files, http):  # each phase against its own baseline
        wall0, cpu0 = results["import typer"]
        for name, (wall, cpu) in results.items():
            print(f"{name:<22} {wall * 1e3:8.0f} {wall / wall0:8.2f} {cpu * 1e3:8.0f} "
                  f"{cpu / cpu0:8.2f}")  # fmt: skip
    print(f"medians of {args.runs} alternating rounds; targets: --help <= 2x, ls <= 3x")
    for name, results, target in (("--help", files, 2.0), ("ls (http)", http, 3.0)):
        print(target_line(name, results, target))
    print("load average (1, 5, 15 min): before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}"
          .format(*load, *os.getloadavg()))  # fmt: skip


if __name__ == "__main__":
    main()
