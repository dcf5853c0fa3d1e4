"""parse_json_body (depth scan + finite-number hooks) against plain json.loads on 1 MiB.

Bodies: a typical one (objects of strings and integers), one full of floats (the finite
check runs per float), the worst case for the depth scan (1 MiB of 64-deep nests, so every
peeling round runs), and a refused one (1 MiB of opening brackets; json.loads itself
cannot parse it). Prints medians in milliseconds and the ratio to json.loads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from runyard.api.jsonbody import MAX_DEPTH, BadJsonBody, parse_json_body

SIZE = 1 << 20


def fill(unit: str, opening: str, closing: str) -> bytes:
    count = (SIZE - len(opening) - len(closing)) // (len(unit) + 1)
    return (opening + ",".join([unit] * count) + closing).encode()


def bodies() -> dict[str, bytes]:
    record = json.dumps({"task_id": "base#demo#x", "note": "résumé [1] {ok}", "n": 12345})
    nest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    return {
        "typical": fill(record, '{"arguments": {"items": [', "]}}"),
        "floats": fill("3.14159", "[", "]"),
        "deep-64-worst": fill(nest, "[", "]"),
        "refused-deep": b"[" * SIZE,
    }


def median_ms(parse: Callable[[bytes], Any], body: bytes, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with contextlib.suppress(BadJsonBody, RecursionError, ValueError):
            parse(body)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"{'body':<16}{'json.loads ms':>15}{'parse_json_body ms':>20}{'ratio':>8}")
    for name, body in bodies().items():
        plain = median_ms(json.loads, body, args.runs)
        ours = median_ms(parse_json_body, body, args.runs)
        print(f"{name:<16}{plain:>15.2f}{ours:>20.2f}{ours / plain:>8.2f}")


if __name__ == "__main__":
    main()
