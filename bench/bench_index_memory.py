"""Where the index's memory goes: bytes per task of each structure, and the process's growth.

    .venv/bin/python bench/bench_index_memory.py --workspace DIR

Builds a TaskRepository (no watching, no snapshot: nothing is written) over an existing
workspace, such as the ``ws`` folder bench_scale.py generates, then prints the bytes per
task of each structure of the index (``sys.getsizeof`` of every object reached, each object
counted once, in the first structure that reaches it) next to the growth of the process's
VmRSS. The difference is what the allocator holds besides the live objects: the free
space left by the start's temporary objects. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from runyard.repository import TaskRepository
from runyard.repository.index import TaskIndex
from runyard.repository.records import INSTANT, PARENTS, RAW
from runyard.workspace import Workspace


def vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def deep_size(obj: object, seen: set[int]) -> int:
    """``getsizeof`` of ``obj`` and of what it holds (containers of the index), once each."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (tuple, list, set, frozenset)):
        size += sum(deep_size(item, seen) for item in obj)
    return size


def status_parts(index: TaskIndex, seen: set[int]) -> dict[str, int]:
    """The statuses dict taken apart: its table, the ids, and each field of the records."""
    parts = {"statuses: dict table": sys.getsizeof(index.statuses)}
    fields = {
        "record tuples": None,
        "packed answer bytes": RAW,
        "sort instants": INSTANT,
        "parents": PARENTS,
    }
    for name in ["task ids", *fields]:
        parts[f"statuses: {name}"] = 0
    for task_id, record in index.statuses.items():
        parts["statuses: task ids"] += deep_size(task_id, seen)
        seen.add(id(record))
        parts["statuses: record tuples"] += sys.getsizeof(record)
        for name, at in fields.items():
            if at is not None:
                parts[f"statuses: {name}"] += deep_size(record[at], seen)
    return parts


def structures(index: TaskIndex) -> dict[str, int]:
    seen: set[int] = set()
    parts = status_parts(index, seen)
    others: Iterable[tuple[str, object]] = [
        ("metadata (beyond shared objects)", index.metadata),
        ("children", index.children),
        ("buckets", index._buckets),
        ("whole order", index._order),
        ("active set", index._active),
    ]
    for name, value in others:
        parts[name] = deep_size(value, seen)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, required=True)
    args = parser.parse_args()
    gc.collect()
    before = vm_rss_mib()
    repo = TaskRepository(Workspace.open(args.workspace, args.workspace.parent / "logs"))
    start = time.perf_counter()
    repo.start(watch=False)
    took = time.perf_counter() - start
    gc.collect()
    grown = vm_rss_mib() - before
    count = len(repo)
    print(f"{count:,} tasks indexed in {took:.1f} s")
    parts = structures(repo._index)
    for name, size in parts.items():
        print(f"  {name:<36}{size / count:8.0f} bytes per task")
    live = sum(parts.values())
    print(f"  {'all structures':<36}{live / count:8.0f} bytes per task")
    print(f"  {'VmRSS growth':<36}{grown * 2**20 / count:8.0f} bytes per task")
    held = (grown * 2**20 - live) / count
    print(f"  {'held besides (allocator, start)':<36}{held:8.0f} bytes per task")
    repo.stop()


if __name__ == "__main__":
    main()
