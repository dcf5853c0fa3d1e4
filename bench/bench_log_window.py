"""read_task_log window cost on a 1 GiB log versus a 1 MiB one (same process).

The window read must cost O(window), not O(file): the ratio of the two medians should stay
near 1. Creates a sparse-free 1 GiB file in a temp dir (written once, then reused by the
reads); prints medians in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runyard.workspace.logs import read_log_window

LINE = ("résumé ✓ step progress 42% — " * 3 + "\n").encode()


def write_log(path: Path, size: int) -> None:
    block = LINE * (1 << 20 // len(LINE) + 1)
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            chunk = block[: size - written]
            fh.write(chunk)
            written += len(chunk)


def median_ms(path: Path, offset_of: Callable[[int, int], int], runs: int, limit: int) -> float:
    size = path.stat().st_size
    times = []
    for index in range(runs):
        offset = offset_of(index, size)
        started = time.perf_counter()
        read_log_window(path, offset, limit)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--limit", type=int, default=65536)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.log", Path(tmp) / "big.log"
        write_log(small, 1 << 20)
        started = time.perf_counter()
        write_log(big, int(args.gib * (1 << 30)))
        print(f"wrote {big.stat().st_size / (1 << 30):.2f} GiB in {time.perf_counter() - started:.1f} s")
        cases = {
            "tail (offset -1)": lambda i, size: -1,
            "head (offset 0)": lambda i, size: 0,
            "middle (scattered offsets)": lambda i, size: (i * 7919 * 4096) % max(1, size - args.limit),
        }
        for name, offset_of in cases.items():
            small_ms = median_ms(small, offset_of, args.runs, args.limit)
            big_ms = median_ms(big, offset_of, args.runs, args.limit)
            print(f"{name:28} 1 MiB log {small_ms:.3f} ms | {args.gib:g} GiB log {big_ms:.3f} ms | ratio {big_ms / small_ms:.2f}")
        os.sync()


if __name__ == "__main__":
    main()
