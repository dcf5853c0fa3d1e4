"""What an Idempotency-Key costs a submit as the keys of the last 24 h pile up.

    .venv/bin/python bench/bench_idempotency.py [--sizes 1000,100000,1000000] [--calls 200]

For each size, a store in a temporary folder is filled with that many unexpired keys (as
many submits within the day), then a new key is reserved and answered ``--calls`` times,
as every submit that carries a key does. Prints the median and p90 of one reserve and
answer, and each size's median against the smallest size's. Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from runyard.api.idempotency import IdempotencyStore

ROUTE = "POST /jobs/submit\nadmin"


def measure(size: int, calls: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="runyard-idem-") as tmp:
        store = IdempotencyStore(Path(tmp))
        try:
            now = time.time()
            spacing = 80_000 / max(size, 1)  # all within the 24 h the keys are kept
            with store._db:
                store._db.executemany(
                    "INSERT INTO keys VALUES (?, ?, 'h', 200, '{}', ?)",
                    ((ROUTE, f"old-{i}", now - i * spacing) for i in range(size)),
                )
            took = []
            for i in range(calls):
                start = time.perf_counter()
                store.reserve(ROUTE, f"new-{i}", "digest")
                store.answer(ROUTE, f"new-{i}", 200, {"task_id": f"base#demo#{i}"})
                took.append(time.perf_counter() - start)
            return took
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    base = None
    print(f"{'keys kept':>10} {'median ms':>10} {'p90 ms':>8} {'vs smallest':>12}")
    for size in sizes:
        took = sorted(measure(size, args.calls))
        median = statistics.median(took)
        base = base or median
        p90 = took[int(0.9 * (len(took) - 1))]
        print(f"{size:>10,} {median * 1000:10.3f} {p90 * 1000:8.3f} {median / base:11.2f}x")


if __name__ == "__main__":
    main()
