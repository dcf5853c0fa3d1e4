"""py-spy over a server and its subprocesses, summed up: where the CPU of a bench round went.

``Sampler`` records collapsed stacks (``py-spy record --subprocesses --format raw``) while
its block runs; ``print_profile`` prints the samples of each process role, the functions
with the most own samples, and the runyard functions the samples fall under (the innermost
runyard frame of each stack, with what it called). py-spy leaves out idle threads: a sample
is a thread running, waiting for a CPU or in disk I/O (an fsync), not one waiting for work.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import TracebackType

RATE = 250  # samples a second: enough over a round of a few seconds, light on 2 cores
_RECORD = re.compile(r"(.*?) (\d+)\n", re.S)  # a stack may span lines (a cmdline's newlines)
_PROCESS = re.compile(r'process (\d+):"')
_LINE = re.compile(r":\d+\)$")


def find_py_spy(given: str | None) -> str | None:
    if given:
        return given
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


class Sampler:
    """``py-spy record`` of ``pid`` and its subprocesses into ``output`` while in the block."""

    def __init__(self, py_spy: str, pid: int, output: Path) -> None:
        self.output = output
        self.argv = [
            py_spy, "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
            "--rate", str(RATE), "--format", "raw", "--output", str(output),
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Sampler:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
        if not self.output.exists():
            raise RuntimeError("py-spy wrote no profile: " + err.decode(errors="replace"))


def read_stacks(path: Path) -> list[tuple[int | None, list[str], int]]:
    """(innermost process id, frames outermost first, samples) of each collapsed stack."""
    stacks = []
    for found in _RECORD.finditer(path.read_text(errors="replace")):
        stack, count = found.group(1), int(found.group(2))
        pids = [int(pid) for pid in _PROCESS.findall(stack)]
        frames = [f for f in stack.split(";") if f and not _PROCESS.match(f) and "(" in f]
        stacks.append((pids[-1] if pids else None, frames, count))
    return stacks


def function_of(frame: str) -> str:
    """``name (file:line)`` without its line: one entry per function."""
    return _LINE.sub(")", frame.strip())


def print_profile(path: Path, roles: dict[int, str], top: int = 15) -> None:
    """Samples by role (a pid not in ``roles`` is a worker), then the top functions."""
    stacks = read_stacks(path)
    total = sum(count for _, _, count in stacks) or 1
    by_role: Counter[str] = Counter()
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    for pid, frames, count in stacks:
        role = roles.get(pid, "worker") if pid is not None else "?"
        by_role[role] += count
        if frames:
            own[f"{role}: {function_of(frames[-1])}"] += count
        ours = [f for f in frames if "runyard/" in f]
        under[f"{role}: {function_of(ours[-1]) if ours else '(outside runyard)'}"] += count
    print(f"\nprofile: {total} samples at {RATE}/s of busy threads, by process:")
    print("  " + ", ".join(f"{role} {n * 100 / total:.0f} %" for role, n in by_role.most_common()))
    print(f"  top {top} functions by own samples:")
    for name, count in own.most_common(top):
        print(f"    {count * 100 / total:5.1f} %  {name}")
    print(f"  top {top} innermost runyard functions (with what they called):")
    for name, count in under.most_common(top):
        print(f"    {count * 100 / total:5.1f} %  {name}")
