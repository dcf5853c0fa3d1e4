"""py-spy over a server and its subprocesses, summed up: where the CPU of a bench round went.

``Sampler`` records collapsed stacks (``py-spy record --subprocesses --format raw``) while
its block runs; ``print_profile`` prints the samples of each process role, the functions
with the most own samples, and the runyard functions the samples fall under (the innermost
runyard frame of each stack, with what it called). py-spy leaves out idle threads: a sample
is a thread running, waiting for a CPU or in disk I/O (an fsync), not one waiting for work.

``thread_cpu`` and ``print_threads`` give the CPU itself (from ``/proc``, not samples) the
server's threads spent over the round, by thread name (``thread_names``: ``py-spy dump``;
a thread Python does not know, such as watchfiles' inotify reader, by its kernel name).
"""

from __future__ import annotations

import os
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
_THREAD = re.compile(r'^Thread (\d+) \([^)]*\): "([^"]*)"', re.M)
_POOL_INDEX = re.compile(r"_\d+$")  # asyncio_0, upload-hash_3: one line per pool


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


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Kernel name and CPU seconds (user and system) of each live thread of ``pid``."""
    found = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return found


def thread_names(py_spy: str, pid: int) -> dict[int, str]:
    """The Python name of each thread of ``pid`` (``py-spy dump``), by thread id."""
    dump = subprocess.run(
        [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    ).stdout
    return {int(tid): name for tid, name in _THREAD.findall(dump)}


def print_threads(
    before: dict[int, tuple[str, float]],
    after: dict[int, tuple[str, float]],
    names: dict[int, str],
    count: int,
) -> None:
    """CPU ms a task of the threads alive at the end of the round, summed by name (a pool's
    threads together); a thread that ended during the round is not counted."""
    spent: Counter[str] = Counter()
    for tid, (kernel_name, seconds) in after.items():
        name = _POOL_INDEX.sub("", names.get(tid, f"{kernel_name} (native)"))
        spent[name] += (seconds - before.get(tid, (kernel_name, 0.0))[1]) * 1000 / count
    print(f"  server CPU ms a task by thread ({sum(spent.values()):.2f} in all):")
    for name, ms in spent.most_common():
        if ms >= 0.005:
            print(f"    {ms:6.2f}  {name}")


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
