"""The two servers bench/compare.py runs: how each starts, its process tree, its memory, its
Job API over one keep-alive connection, and a stop that leaves nothing running.

runyard runs from this checkout's interpreter. AxonX 0.2.2 runs from a venv of its own in
``~/.cache/runyard-bench`` (Python 3.12, built on first use: axonx and its declared
dependencies less ``claude-agent-sdk``, used only by its agent runner). Its server starts
from a config derived from its own ``default.yaml`` with that agent component and the jobs
on it left out, bound to 127.0.0.1 with a token.
"""

from __future__ import annotations

import contextlib
import glob
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

AXONX_VERSION = "0.2.2"
CACHE = Path.home() / ".cache" / "runyard-bench"
AXONX_VENV = CACHE / f"axonx-{AXONX_VERSION}-venv"
AXONX_UNUSED = {"claude-agent-sdk"}
TOKEN = "bench-token-0123456789abcdef"
IDLE_SECONDS = 2.0  # both servers (uvicorn) close a connection idle for 5 s


class JobError(RuntimeError):
    pass


# the job API


class Api:
    """``POST /jobs/<name>`` over one keep-alive connection (one per thread)."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.headers = {"content-type": "application/json", "authorization": f"Bearer {TOKEN}"}
        self.used = time.monotonic()

    def call(self, job: str, timeout: float | None = None, **arguments: Any) -> Any:
        """The answer of a job that succeeded; raises JobError otherwise."""
        if timeout is not None:
            self.conn.timeout = timeout
            if self.conn.sock is not None:
                self.conn.sock.settimeout(timeout)
        status, raw = self._post(job, arguments)
        if status != 200:
            raise JobError(f"{job}: HTTP {status} {raw[:200]!r}")
        envelope = json.loads(raw)
        if not envelope.get("success"):
            raise JobError(f"{job}: {str(envelope)[:300]}")
        return envelope["answer"]

    def sized(self, job: str, **arguments: Any) -> tuple[float, int, Any]:
        """(seconds, answer bytes, answer) of one call."""
        started = time.perf_counter()
        status, raw = self._post(job, arguments)
        took = time.perf_counter() - started
        if status != 200:
            raise JobError(f"{job}: HTTP {status} {raw[:200]!r}")
        return took, len(raw), json.loads(raw)["answer"]

    def _post(self, job: str, arguments: dict[str, Any]) -> tuple[int, bytes]:
        if time.monotonic() - self.used > IDLE_SECONDS:
            self.conn.close()  # the server may have closed it: reconnect before, never retry
        self.conn.request(
            "POST", f"/jobs/{job}", json.dumps({"arguments": arguments}), self.headers
        )
        reply = self.conn.getresponse()
        raw = reply.read()
        self.used = time.monotonic()
        return reply.status, raw

    def close(self) -> None:
        self.conn.close()


# processes and memory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        parent = int(raw[raw.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def pss_mib(pid: int) -> float:
    """Proportional set size: shared pages counted once across the processes that share them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def hwm_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class MemoryWatch:
    """Samples the tree's PSS every ``interval`` s; over ``cap_mib`` it kills the tree."""

    def __init__(self, pid: int, cap_mib: float, interval: float = 0.25) -> None:
        self.pid, self.cap, self.interval = pid, cap_mib, interval
        self.peak = 0.0
        self.over_cap = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = descendants(self.pid)
            total = sum(pss_mib(pid) for pid in tree)
            self.peak = max(self.peak, total)
            if total > self.cap:
                self.over_cap = True
                kill_all(tree)
                return
            self._stop.wait(self.interval)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# the servers


@dataclass
class Server:
    """One started server: its process, port, and where it keeps its files."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    root: Path
    started: float
    output: Path
    tree_seen: set[int] = field(default_factory=set)

    def wait_port(self, deadline: float) -> float:
        """Seconds from the start until the port accepts."""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.output.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return time.monotonic() - self.started
            except OSError:
                time.sleep(0.01)
        raise RuntimeError(
            f"{self.name} did not listen in time:\n{self.output.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; then whatever it started that is still running."""
        tree = set(descendants(self.proc.pid)) | self.tree_seen
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        kill_all(sorted(tree - {self.proc.pid}))
        kill_strays(self.root)


def kill_strays(root: Path) -> None:
    """Processes still running in ``root`` (workers outlive a server stop by design)."""
    needle = str(root).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd").encode()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline or cwd == needle or cwd.startswith(needle + b"/"):
            kill_all([int(entry.name)])


def start(name: str, argv: list[str], root: Path, port: int, env: dict[str, str]) -> Server:
    output = root / f"{name}-server.out"
    with output.open("ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    return Server(name, proc, port, root, started, output)


def start_runyard(root: Path, port: int) -> Server:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "runyard.yaml"
    config.write_text("{}\n")
    argv = [
        sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workspace-dir", str(root / "ws"), "--log-dir", str(root / "logs"),
        "--config", str(config), "--token", TOKEN,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return start("runyard", argv, root, port, env)


def start_axonx(root: Path, port: int) -> Server:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "axonx-bench.yaml"
    config.write_text(yaml.safe_dump(axonx_config(root, port)))
    argv = [str(AXONX_VENV / "bin" / "axonx"), "start", "--config", str(config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AXONX_", "PYTHON"))}
    return start("axonx", argv, root, port, env)


def axonx_config(root: Path, port: int) -> dict[str, Any]:
    """AxonX's own default.yaml, less its agent component and the jobs that use it."""
    (default,) = glob.glob(
        str(AXONX_VENV / "lib/python3.12/site-packages/axonx/config/default.yaml")
    )
    config = yaml.safe_load(Path(default).read_text())
    config["components"].pop("agent", None)
    config["jobs"] = {
        name: job for name, job in config["jobs"].items()
        if not any("agent" in step for step in job.get("steps", []))
    }  # fmt: skip
    config.update(workspace_dir=str(root / "ws"), log_dir=str(root / "logs"))
    config["service"].update(host="127.0.0.1", port=port, token=TOKEN, web_enabled=False)
    return config


STARTERS: dict[str, Callable[[Path, int], Server]] = {
    "runyard": start_runyard,
    "axonx": start_axonx,
}


# calls both servers answer alike


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def launch(system: str, root: Path, timeout: float) -> tuple[Server, float]:
    """A started server whose Job API answers, and the seconds until its port opened."""
    port = free_port()
    server = STARTERS[system](root, port)
    deadline = time.monotonic() + timeout
    try:
        opened = server.wait_port(deadline)
        api = Api(port, timeout=10)
        while True:
            try:
                api.call("list_task_ids")
                break
            except (JobError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        api.close()
    except BaseException:
        server.stop()
        raise
    return server, opened


def submit_demo(api: Api, index: int, timeout: float) -> dict[str, Any]:
    return dict(api.call("submit", timeout=timeout, task="demo", x=index, y=1))


def wait_for(api: Api, handle: dict[str, Any], timeout: float) -> dict[str, Any]:
    answer = api.call(
        "wait_task", timeout=timeout, task_id=handle["task_id"], run_id=handle["run_id"]
    )
    if answer["state"] != "succeeded":
        raise JobError(f"{handle['task_id']} ended {answer['state']}: {answer.get('error')}")
    return dict(answer)


# the AxonX venv


def find_python312() -> str | None:
    candidates = [shutil.which("python3.12")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        reply = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        candidates += sorted(glob.glob(f"{reply.stdout.strip()}/versions/3.12*/bin/python3.12"))
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.12*/bin/python3.12")))
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def axonx_venv() -> Path | None:
    """The venv with axonx==0.2.2 (built on first use), or None without a Python 3.12."""
    if (AXONX_VENV / ".ready").exists():
        return AXONX_VENV
    python312 = find_python312()
    if python312 is None:
        return None
    print(f"building {AXONX_VENV} (pip install axonx=={AXONX_VERSION}) ...", flush=True)
    shutil.rmtree(AXONX_VENV, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([python312, "-m", "venv", str(AXONX_VENV)], check=True, timeout=300)
    pip = [str(AXONX_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", f"axonx=={AXONX_VERSION}"], check=True, timeout=900)
    subprocess.run([*pip, *axonx_requirements()], check=True, timeout=1800)
    (AXONX_VENV / ".ready").write_text(AXONX_VERSION)
    return AXONX_VENV


def axonx_requirements() -> list[str]:
    probe = (
        "import importlib.metadata as m; "
        "print('\\n'.join(r for r in m.requires('axonx') or [] if 'extra ==' not in r))"
    )
    python = str(AXONX_VENV / "bin" / "python")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    wanted = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return [
        r for r in wanted if r.split(">")[0].split("=")[0].split("<")[0].strip() not in AXONX_UNUSED
    ]
