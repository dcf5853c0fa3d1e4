"""bench/compare.py at scale: a workspace of many finished tasks for each system, cloned from
one real task it ran, then its first start, lists, lineage, status, log windows, restart."""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from compare_servers import (
    STARTERS,
    Api,
    JobError,
    Server,
    free_port,
    hwm_mib,
    launch,
    submit_demo,
    wait_for,
)

Cell = float | str
LINE = b"2026-01-01 00:00:00.000 | INFO | bench | a line of a long task log, to be windowed\n"


def prepare(system: str, root: Path, count: int, log_mib: int, timeout: float) -> str:
    """Run one demo task, clone its folder to ``count`` tasks, grow its log; its task id."""
    server, _ = launch(system, root, timeout)
    try:
        api = Api(server.port)
        handle = submit_demo(api, 0, timeout)
        status = wait_for(api, handle, timeout)
        api.close()
    finally:
        server.stop()
    clone(root / "ws" / "base" / handle["task_id"], handle["run_id"], count - 1)
    grow(Path(status["log_path"]), log_mib)
    return str(handle["task_id"])


def clone(folder: Path, run_id: str, count: int) -> None:
    """``count`` copies of a finished task's records, each with its own name and run id."""
    name = folder.name.rsplit("#", 1)[1]
    records = {
        f.name: f.read_text()
        for f in folder.iterdir()
        if f.is_file() and not f.name.startswith(".")
    }
    for index in range(count):
        new_name, new_run = f"bench-{index:06d}", uuid.uuid4().hex
        target = folder.with_name(folder.name.replace(name, new_name))
        target.mkdir()
        for file_name, text in records.items():
            (target / file_name).write_text(text.replace(name, new_name).replace(run_id, new_run))


def grow(log: Path, mib: int) -> None:
    chunk = LINE * ((1 << 20) // len(LINE))
    with log.open("ab") as fh:
        for _ in range(mib):
            fh.write(chunk)


def start_listed(
    system: str, root: Path, count: int, timeout: float
) -> tuple[Server, float, float]:
    """A server started on ``root``: seconds to an open port, to a complete list_task_ids."""
    server = STARTERS[system](root, free_port())
    deadline = time.monotonic() + timeout
    try:
        opened = server.wait_port(deadline)
        api = Api(server.port, timeout=timeout)
        while True:
            try:
                if len(api.call("list_task_ids")) >= count:
                    break
            except (JobError, OSError):
                api.close()
                api = Api(server.port, timeout=timeout)
            if time.monotonic() > deadline:
                raise JobError(f"{system} did not list {count} tasks in {timeout:.0f} s")
            time.sleep(0.02)
        listed = time.monotonic() - server.started
        api.close()
    except BaseException:
        server.stop()
        raise
    return server, opened, listed


def timed(api: Api, times: int, job: str, **arguments: Any) -> tuple[float, float]:
    """Median ms and the answer's MB of ``times`` calls."""
    samples, size = [], 0
    for _ in range(times):
        took, size, _ = api.sized(job, **arguments)
        samples.append(took * 1000)
    return statistics.median(samples), size / 1e6


def queries(api: Api, task_id: str, count: int) -> dict[str, Cell]:
    n = f"{count:,}"
    ids_ms = timed(api, 5, "list_task_ids")[0]
    summary_ms, summary_mb = timed(api, 3, "list_task_statuses", detail="summary")
    full_ms, full_mb = timed(api, 3, "list_task_statuses", detail="full")
    return {
        f"{n} tasks: list_task_ids (ms)": ids_ms,
        f"{n} tasks: list_task_statuses summary (ms)": summary_ms,
        f"{n} tasks: list_task_statuses summary (MB)": summary_mb,
        f"{n} tasks: list_task_statuses full (ms)": full_ms,
        f"{n} tasks: list_task_statuses full (MB)": full_mb,
        f"{n} tasks: get_task_graph (ms)": timed(api, 10, "get_task_graph", task_id=task_id)[0],
        f"{n} tasks: status (ms)": timed(api, 20, "status", task_id=task_id)[0],
    }


def log_windows(api: Api, task_id: str, log_mib: int) -> dict[str, Cell]:
    size = api.call("read_task_log", task_id=task_id, offset=-1, limit=8192)["file_size"]
    tail = timed(api, 20, "read_task_log", task_id=task_id, offset=-1, limit=8192)[0]
    middle = timed(api, 20, "read_task_log", task_id=task_id, offset=size // 2, limit=65536)[0]
    return {
        f"read_task_log tail 8 KiB of a {log_mib} MiB log (ms)": tail,
        f"read_task_log 64 KiB in the middle of a {log_mib} MiB log (ms)": middle,
    }


def scale(system: str, root: Path, count: int, log_mib: int, timeout: float) -> dict[str, Cell]:
    started = time.perf_counter()
    task_id = prepare(system, root, count, log_mib, timeout)
    print(f"    {system}: {count:,} task folders and a {log_mib} MiB log made in "
          f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
    n = f"{count:,}"
    server, opened, listed = start_listed(system, root, count, timeout)
    try:
        api = Api(server.port, timeout=timeout)
        found = queries(api, task_id, count) | log_windows(api, task_id, log_mib)
        found[f"{n} tasks: server peak RSS (MiB)"] = hwm_mib(server.proc.pid)
        api.close()
    finally:
        server.stop()
    server, reopened, relisted = start_listed(system, root, count, timeout)
    server.stop()
    return {
        f"{n} tasks: first start, port open (s)": opened,
        f"{n} tasks: first start, complete list_task_ids (s)": listed,
        f"{n} tasks: restart, complete list_task_ids (s)": relisted,
    } | found
