"""Agent-run figures: upload throughput and server memory, run creation with large inputs
(hard links, reflinks, copies), and the cost of starting a sandbox.

Prints figures; asserts nothing. Usage::

    python bench/bench_agents.py [--upload-mib 1024] [--inputs-mib 1024] [--starts 30]
        [--reflink-dir /mnt/xfs]

The upload goes to a real server over HTTP (multipart, streamed from disk); the server's
peak resident memory is read from /proc before and after. Run creation is measured on an
in-process service (the part of ``POST /runs`` that scales with the inputs) and over HTTP.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from runyard.agents.catalog import ReceivedUpload  # noqa: E402
from runyard.agents.runs import RunRequest  # noqa: E402
from runyard.api.agentservice import AgentService  # noqa: E402
from runyard.config import Settings  # noqa: E402
from runyard.executors.base import LaunchSpec  # noqa: E402
from runyard.executors.local import LocalExecutor  # noqa: E402
from runyard.executors.sandbox import BwrapSandbox, find_bwrap, probe_bwrap  # noqa: E402
from serverproc import start_server  # noqa: E402

MIB = 1 << 20


def make_file(path: Path, mib: int) -> Path:
    block = os.urandom(MIB)
    with open(path, "wb") as fh:
        for index in range(mib):
            fh.write(block[index % 251 :] + block[: index % 251])
    return path


def peak_rss_mib(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def raw_sha256_mib_s(path: Path) -> float:
    started = time.perf_counter()
    with open(path, "rb") as fh:
        hashlib.file_digest(fh, "sha256")
    return path.stat().st_size / MIB / (time.perf_counter() - started)


def bench_upload(work: Path, mib: int) -> None:
    data = make_file(work / "upload.bin", mib)
    server = start_server(work / "srv", config={"upload_max_bytes": (mib + 1) * MIB})
    try:
        with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=None) as client:
            session = client.post("/sessions", json={"title": "bench"}).json()["id"]
            rss_before, peak_before = peak_rss_mib(server.proc.pid)
            started = time.perf_counter()
            with open(data, "rb") as fh:
                reply = client.post(
                    "/artifacts/upload", data={"sessionId": session}, files={"file": ("u.bin", fh)}
                )
            seconds = time.perf_counter() - started
            rss_after, peak_after = peak_rss_mib(server.proc.pid)
        assert reply.status_code == 201, reply.text
    finally:
        server.stop()
    print(f"upload {mib} MiB over HTTP: {seconds:.2f} s = {mib / seconds:.0f} MiB/s "
          "(multipart parse + sha256 + write + fsync)")  # fmt: skip
    print(f"  raw hashlib sha256 on this machine: {raw_sha256_mib_s(data):.0f} MiB/s")
    print(f"  server RSS before {rss_before:.0f} MiB, after {rss_after:.0f} MiB; "
          f"peak RSS before {peak_before:.0f} MiB, after {peak_after:.0f} MiB "
          f"(+{peak_after - peak_before:.0f} MiB for a {mib} MiB upload)")  # fmt: skip
    data.unlink()


def trivial_package(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(
        '{"name": "noop", "version": "1", "entry": ["/bin/sh", "-c", '
        '"echo done > $RUNYARD_WORKSPACE/out/final-answer.md"]}'
    )
    return folder


def bench_creation(work: Path, mib: int, mode: str, label: str, repeats: int = 5) -> None:
    settings = Settings(
        workspace_dir=work / f"ws-{label}", log_dir=work / f"logs-{label}",
        agent_package=trivial_package(work / "noop"), agent_sandbox=mode,
    )  # fmt: skip
    service = AgentService.open(settings)
    service.start()
    try:
        session = service.catalog.create_session("bench")
        files = 8
        block = os.urandom(MIB)
        for index in range(files):
            sink = service.catalog.open_upload({"sessionId": session.id}, None)
            for _ in range(mib // files):
                sink.add(block)
                sink.flush()
            sink.finish()
            fields = {"sessionId": session.id, "relativePath": f"data/part-{index}.bin"}
            received = ReceivedUpload(fields, f"part-{index}.bin", "", sink)
            service.catalog.finish_upload(received, None)
        times, placement = [], ""
        for _ in range(repeats):
            started = time.perf_counter()
            run = service.runs.create(RunRequest(session.id, "go"))
            times.append((time.perf_counter() - started) * 1000)
            while not service.runs.run(run.id).state.terminal:
                time.sleep(0.01)
            context = (service.layout.run_subdir(run.id, "in") / "run-context.json").read_text()
            placement = (
                "hardlink"
                if '"hardlink"' in context
                else "reflink"
                if '"reflink"' in context
                else "copy"
            )
        print(f"create a run with {mib} MiB of inputs in {files} files ({label}, {placement}): "
              f"median {statistics.median(times):.1f} ms, min {min(times):.1f} ms")  # fmt: skip
    finally:
        service.stop()


def bench_http_creation(work: Path, mib: int) -> None:
    package = trivial_package(work / "noop-http")
    server = start_server(work / "srv-create", config={"agent_package": str(package)})
    base = server.url + "/api/v1"
    try:
        with httpx.Client(base_url=base, headers=server.headers, timeout=None) as client:
            session = client.post("/sessions", json={}).json()["id"]
            data = make_file(work / "input.bin", mib)
            with open(data, "rb") as fh:
                files = {"file": ("i.bin", fh)}
                client.post("/artifacts/upload", data={"sessionId": session}, files=files)
            data.unlink()
        times = []
        for _ in range(5):
            # a fresh connection per request: on a reused one this machine's TCP adds a
            # ~40 ms delayed-ACK stall to every answer, which is not the server's work
            with httpx.Client(base_url=base, headers=server.headers, timeout=None) as client:
                started = time.perf_counter()
                body = {"sessionId": session, "userPrompt": "go"}
                run = client.post("/runs", json=body).json()
                times.append((time.perf_counter() - started) * 1000)
                while client.get(f"/runs/{run['id']}").json()["state"] in ("queued", "running"):
                    time.sleep(0.01)
        print(
            f"POST /api/v1/runs with a {mib} MiB input ({run['isolation']}, new connection): "
            f"median {statistics.median(times):.1f} ms"
        )
    finally:
        server.stop()


def bench_sandbox_start(work: Path, starts: int) -> None:
    local = LocalExecutor()
    sandbox = BwrapSandbox(local)
    for label, executor in (("plain process", local), ("bwrap sandbox", sandbox)):
        if label.startswith("bwrap") and probe_bwrap(find_bwrap()) is not None:
            print("bwrap sandbox: unavailable here")
            continue
        times = []
        for _ in range(starts):
            spec = LaunchSpec(argv=["/bin/true"], log_path=work / "start.log", network=False)
            started = time.perf_counter()
            handle = executor.launch(spec)
            local.wait_exit(handle, 30)
            times.append((time.perf_counter() - started) * 1000)
            executor.cleanup(handle)
        print(f"start and exit /bin/true, {label}: median {statistics.median(times):.1f} ms, "
              f"p90 {sorted(times)[int(0.9 * len(times))]:.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--upload-mib", type=int, default=1024)
    parser.add_argument("--inputs-mib", type=int, default=1024)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--reflink-dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runyard-bench-") as folder:
        work = Path(folder)
        bench_upload(work, args.upload_mib)
        bench_creation(work, args.inputs_mib, "bwrap", "sandboxed")
        bench_creation(work, args.inputs_mib, "none", "plain")
        bench_http_creation(work, args.inputs_mib)
        bench_sandbox_start(work, args.starts)
    if args.reflink_dir is not None:
        with tempfile.TemporaryDirectory(prefix="runyard-bench-", dir=args.reflink_dir) as folder:
            bench_creation(Path(folder), args.inputs_mib // 4, "none", "plain, reflink fs")


if __name__ == "__main__":
    main()
