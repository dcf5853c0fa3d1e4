"""Sync throughput and memory: many small finished tasks, then one large artifact.

Prints tasks/s and MB/s of ``push`` to a real receiver server on 127.0.0.1, the peak RSS
of the receiver (``VmHWM`` from /proc) and of this sending process. The small tasks are
written directly with the workspace API (records, one artifact, a run log), not run.

    python bench/bench_sync.py --tasks 10000 --big-mb 1024
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from runyard.sync.candidates import TaskFilter  # noqa: E402
from runyard.sync.sender import Receiver, push  # noqa: E402
from runyard.workspace.artifacts import sha256_file  # noqa: E402
from runyard.workspace.layout import Workspace  # noqa: E402
from runyard.workspace.records import TaskMetadata, TaskState, TaskStatus, utcnow  # noqa: E402
from serverproc import ServerProcess, start_server  # noqa: E402


def make_task(ws: Workspace, name: str, payload: bytes | None = None, big_mb: int = 0) -> None:
    task_id = f"base#demo#{name}"
    folder = ws.task_dir(task_id)
    folder.mkdir(parents=True)
    artifact = folder / "out.bin"
    if big_mb:
        block = hashlib.sha256(b"seed").digest() * (1 << 15)  # 1 MiB
        with open(artifact, "wb") as fh:
            for _ in range(big_mb):
                fh.write(block)
    else:
        artifact.write_bytes(payload or b"")
    size, digest = sha256_file(artifact)
    result = {"value": 1, "artifacts": {"out": {"path": "out.bin", "size": size, "sha256": digest}}}
    run_id = uuid.uuid4().hex
    log = ws.run_log_path(task_id, run_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("Demo result=1\n")
    now = utcnow()
    ws.write_metadata(
        TaskMetadata(
            task_id=task_id,
            reg_name="demo",
            created_at=now,
            task_type="base",
            input_params={"x": 1},
            output_params=result,
        )  # fmt: skip
    )
    ws.write_status(
        TaskStatus(
            task_id=task_id,
            run_id=run_id,
            task_type="base",
            task_name="demo",
            state=TaskState.SUCCEEDED,
            created_at=now,
            started_at=now,
            finished_at=now,
            result=result,
            log_path=str(log),
        )  # fmt: skip
    )
    (folder / "events.jsonl").write_text('{"kind": "state", "state": "succeeded"}\n')


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_push(ws: Workspace, srv: ServerProcess, label: str, task_filter: TaskFilter) -> None:
    before = rss_mb(srv.proc.pid)
    start = time.perf_counter()
    report = push(ws, Receiver(srv.url, srv.token), task_filter)
    took = time.perf_counter() - start
    print(
        f"{label}: sent {len(report.sent)} skipped {len(report.skipped)} "
        f"refused {len(report.refused)} in {took:.2f} s — {len(report.sent) / took:.0f} tasks/s, "
        f"{report.bytes / took / 1e6:.1f} MB/s; receiver RSS {before:.0f} -> "
        f"{rss_mb(srv.proc.pid):.0f} MiB (peak {peak_rss_mb(srv.proc.pid):.0f} MiB); "
        f"sender peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--big-mb", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        root = Path(tmp)
        ws = Workspace.open(root / "src" / "ws", root / "src" / "logs")
        ws.ensure()
        start = time.perf_counter()
        for i in range(args.tasks):
            make_task(ws, f"t{i}", payload=b"x" * 512)
        print(f"made {args.tasks} tasks in {time.perf_counter() - start:.1f} s")
        srv = start_server(root / "dst")
        try:
            run_push(ws, srv, f"{args.tasks} small tasks", TaskFilter())
            run_push(ws, srv, "second push (nothing to send)", TaskFilter())
            if args.big_mb:
                make_task(ws, "big", big_mb=args.big_mb)
                run_push(ws, srv, f"one {args.big_mb} MiB artifact", TaskFilter(("base#demo#big",)))
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
