"""Agent-run figures: upload throughput and server memory, run creation with large inputs
(hard links, reflinks, copies), and the cost of starting a sandbox.

Prints figures; asserts nothing. Usage::

    python bench/bench_agents.py [--upload-mib 1024] [--upload-rounds 3] [--only-upload]
        [--inputs-mib 1024] [--starts 30] [--reflink-dir /mnt/xfs]

The upload goes to a real server over HTTP: a multipart envelope around the file sent with
sendfile on a plain socket, so the client costs next to nothing. Each round also hashes
the file (sha256) and writes and fsyncs a file of the same size in the server's uploads
folder, and prints the upload speed against the smaller of the two (the target is 80 %),
the server's CPU seconds and its peak resident memory (from /proc). The same file also goes
to a bare ASGI app taking the same steps (``upload_bare.py``: multipart parsing, sha256 and
the write in worker threads, fsync) in the same rounds: what an upload costs in Python on
this machine without runyard. Run creation is measured on an
in-process service (the part of ``POST /runs`` that scales with the inputs) and over HTTP.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import statistics
import subprocess
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


def sha256_seconds(path: Path) -> float:
    """Wall seconds for hashlib to hash a file already in the page cache."""
    started = time.perf_counter()
    with open(path, "rb") as fh:
        hashlib.file_digest(fh, "sha256")
    return time.perf_counter() - started


def disk_write_seconds(folder: Path, size: int) -> float:
    """Wall seconds to write ``size`` bytes in 1 MiB blocks to a new file and fsync it."""
    block = os.urandom(MIB)
    path = folder / "bench-disk-write.bin"
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for offset in range(0, size, MIB):
            os.write(fd, block[: min(MIB, size - offset)])
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - started
    path.unlink()
    return seconds


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_upload(url: str, headers: dict[str, str], session: str, path: Path) -> tuple[int, bytes]:
    """POST a file as multipart over a plain socket: a prebuilt envelope around sendfile.

    The client does almost no work (no per-chunk Python, no copy through user space), so
    the time measured is the server's.
    """
    boundary = "benchBoundary" + os.urandom(8).hex()
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="sessionId"\r\n\r\n{session}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="u.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = path.stat().st_size
    host, _, port = url.removeprefix("http://").partition(":")
    request = (
        f"POST /api/v1/artifacts/upload HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(head) + size + len(tail)}\r\nConnection: close\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        + "\r\n"
    ).encode()
    with socket.create_connection((host, int(port))) as sock, open(path, "rb") as fh:
        # without it the small tail after sendfile waits for the server's delayed ACK
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request + head)
        sent = 0
        while sent < size:
            sent += os.sendfile(sock.fileno(), fh.fileno(), sent, size - sent)
        sock.sendall(tail)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def start_bare(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The bare upload app of ``upload_bare.py``, listening on 127.0.0.1."""
    folder = work / "bare"
    folder.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = Path(__file__).with_name("upload_bare.py")
    argv = [sys.executable, str(script), "--port", str(port), "--folder", str(folder)]
    proc = subprocess.Popen(argv)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("upload_bare.py did not listen within 30 s")


def timed_upload(
    pid: int, url: str, headers: dict[str, str], session: str, data: Path
) -> tuple[float, float, float]:
    """Wall, server CPU and client CPU seconds of one upload of ``data``."""
    cpu_before, client_before = cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    status, body = raw_upload(url, headers, session, data)
    seconds = time.perf_counter() - started
    assert status == 201, body
    return seconds, cpu_seconds(pid) - cpu_before, time.process_time() - client_before


def bench_upload(work: Path, mib: int, rounds: int) -> None:
    """Upload speed against min(sha256, disk write), each measured in every round, and
    against the same steps in a bare app (``upload_bare.py``).

    The rounds alternate hashing the file, writing and fsyncing a file of the same size in
    the server's uploads folder, and uploading it over HTTP to runyard and to the bare app
    (which goes first alternates), so all of them see the same load.
    """
    data = make_file(work / "upload.bin", mib)
    size = mib * MIB
    bare, bare_url = start_bare(work)
    try:
        server = start_server(work / "srv", config={"upload_max_bytes": size + MIB})
    except BaseException:
        bare.kill()
        raise
    uploads = server.workspace / "agent" / "uploads"
    ratios, versus_bare = [], []
    try:
        with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=None) as client:
            session = client.post("/sessions", json={"title": "bench"}).json()["id"]
        _, peak_start = peak_rss_mib(server.proc.pid)
        print(f"upload {mib} MiB, {rounds} rounds; server peak RSS before: {peak_start:.0f} MiB")
        for index in range(rounds):
            sha_mib_s = mib / sha256_seconds(data)
            disk_mib_s = mib / disk_write_seconds(uploads, size)
            runs = [("runyard", server.proc.pid, server.url, server.headers, session),
                    ("bare", bare.pid, bare_url, {}, "-")]  # fmt: skip
            timed = {}
            for label, pid, url, headers, sid in runs[:: 1 if index % 2 == 0 else -1]:
                timed[label] = timed_upload(pid, url, headers, sid, data)
            seconds, server_cpu, client_cpu = timed["runyard"]
            bare_seconds, bare_cpu, _ = timed["bare"]
            least = min(sha_mib_s, disk_mib_s)
            ratios.append(mib / seconds / least)
            versus_bare.append(bare_seconds / seconds)
            _, peak = peak_rss_mib(server.proc.pid)
            print(f"  round {index + 1}: sha256 {sha_mib_s:.0f} MiB/s, disk write+fsync "
                  f"{disk_mib_s:.0f} MiB/s, min {least:.0f}; upload {mib / seconds:.0f} MiB/s "
                  f"({seconds:.2f} s wall, server CPU {server_cpu:.2f} s, client CPU "
                  f"{client_cpu:.2f} s) = {ratios[-1]:.0%} of min (target 80 %); the bare app "
                  f"{mib / bare_seconds:.0f} MiB/s (CPU {bare_cpu:.2f} s) = "
                  f"{mib / bare_seconds / least:.0%} of min; runyard = {versus_bare[-1]:.0%} of "
                  f"the bare app; server peak RSS {peak:.0f} MiB; "
                  f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        rss_after, peak_after = peak_rss_mib(server.proc.pid)
    finally:
        server.stop()
        bare.terminate()
        bare.wait(30)
    print(f"  upload / min(sha256, disk): median {statistics.median(ratios):.0%}, best "
          f"{max(ratios):.0%}, worst {min(ratios):.0%}; runyard / the bare app: median "
          f"{statistics.median(versus_bare):.0%}; server peak RSS {peak_start:.0f} -> "
          f"{peak_after:.0f} MiB (+{peak_after - peak_start:.0f} MiB over {rounds} x {mib} MiB)")  # fmt: skip
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
    parser.add_argument("--upload-rounds", type=int, default=3)
    parser.add_argument("--reflink-dir", type=Path, default=None)
    parser.add_argument("--only-upload", action="store_true", help="skip the other figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runyard-bench-") as folder:
        work = Path(folder)
        bench_upload(work, args.upload_mib, args.upload_rounds)
        if args.only_upload:
            return
        bench_creation(work, args.inputs_mib, "bwrap", "sandboxed")
        bench_creation(work, args.inputs_mib, "none", "plain")
        bench_http_creation(work, args.inputs_mib)
        bench_sandbox_start(work, args.starts)
    if args.reflink_dir is not None:
        with tempfile.TemporaryDirectory(prefix="runyard-bench-", dir=args.reflink_dir) as folder:
            bench_creation(Path(folder), args.inputs_mib // 4, "none", "plain, reflink fs")


if __name__ == "__main__":
    main()
