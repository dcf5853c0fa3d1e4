"""A real runyard server in a subprocess on 127.0.0.1 with a random port, for tests."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

START_TIMEOUT = 60.0  # two parallel test workers on a busy 2-core machine: starts can be slow


@dataclass
class ServerProcess:
    url: str
    root: Path
    workspace: Path
    log_dir: Path
    config_path: Path
    proc: subprocess.Popen[str]
    token: str | None = None
    output: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def call(self, job: str, timeout: float = 60.0, **arguments: Any) -> dict[str, Any]:
        """POST /jobs/<job>; returns the JobResponse, asserting HTTP 200."""
        with self.client(timeout) as client:
            reply = client.post(f"/jobs/{job}", json={"arguments": arguments})
        assert reply.status_code == 200, reply.text
        return reply.json()

    def cli_env(self) -> dict[str, str]:
        env = dict(os.environ, RUNYARD_URL=self.url)
        if self.token:
            env["RUNYARD_TOKEN"] = self.token
        return env

    def stop(
        self, sig: int = signal.SIGTERM, timeout: float = 15.0, *, keep_runs: bool = False
    ) -> int:
        """Stop the server; ``keep_runs`` leaves its workers for a server restarted here."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not keep_runs:
            kill_strays(self.root)
        if self.pump is not None:
            self.pump.join(10)  # it closes the pipe at its end
        elif self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def kill_strays(root: Path) -> list[int]:
    """SIGKILL processes a test left behind under ``root`` (workers and sandboxes survive a
    server stop by design, to be adopted by the next server; a test has no next server)."""
    needle = str(root).encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd").encode()
        except OSError:
            continue
        if needle in cmdline or cwd == needle or cwd.startswith(needle + b"/"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed


def start_server(
    root: Path,
    *,
    token: str | None = None,
    config: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    workspace: Path | None = None,
    auth: bool = True,
    wait_ready: bool = True,
    args: list[str] | None = None,
    python: str | None = None,
) -> ServerProcess:
    """Start ``runyard serve`` with its workspace, logs and config under ``root``.

    ``token`` is given in a file (``--token-file``, as the docs advise). Without one the
    server reuses the token its ``server.json`` kept, or generates one; it is read from
    ``server.json`` into ``server.token`` (so ``headers``, ``client()``, ``call()`` and
    ``cli_env()`` carry it). ``auth=False`` serves with ``--no-auth``; ``args`` are more
    options of ``serve``; ``python`` the interpreter it runs under (this one's by default).
    It returns once ``/health`` says the start-up is over (no
    ``indexing``); with ``wait_ready=False`` as soon as the port answers.
    """
    root.mkdir(parents=True, exist_ok=True)
    workspace = workspace or root / "ws"
    log_dir = root / "logs"
    config_path = root / "runyard.yaml"
    config_path.write_text(yaml.safe_dump(config or {}))
    argv = [
        python or sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", "0",
        "--workspace-dir", str(workspace), "--log-dir", str(log_dir),
        "--config", str(config_path),
    ]  # fmt: skip
    if token:
        token_file = root / ".server-token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        argv += ["--token-file", str(token_file)]
    if not auth:
        argv.append("--no-auth")
    argv += args or []
    proc_env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    proc_env.update(env or {})
    proc = subprocess.Popen(
        argv, cwd=root, env=proc_env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        # the pump closes the pipe it reads at its end (workers kept for adoption may hold
        # it open after the server stops), so no test leaves an unclosed file to be collected
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                output.append(line)
                lines.put(line)
        finally:
            proc.stdout.close()

    pump_thread = threading.Thread(target=pump, daemon=True)
    pump_thread.start()
    url = _await_url(proc, lines, output)
    if token is None and auth:
        token = json.loads((workspace / "server.json").read_text())["token"]
    server = ServerProcess(
        url, root, workspace, log_dir, config_path, proc, token, output, pump_thread
    )
    _await_health(server, wait_ready)
    return server


_BANNER = re.compile(r"runyard serving .* on (http://127\.0\.0\.1:\d+)\s*$")


def _await_url(proc: subprocess.Popen[str], lines: queue.Queue[str], output: list[str]) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if proc.poll() is not None:
                raise RuntimeError("server exited at start:\n" + "".join(output)) from None
            continue
        found = _BANNER.match(line)
        if found:
            return found.group(1)
    proc.kill()
    proc.wait(10)
    raise RuntimeError("server did not start in time:\n" + "".join(output))


def _await_health(server: ServerProcess, wait_ready: bool = True) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            reply = httpx.get(server.url + "/health", timeout=2)
            if reply.status_code == 200 and not (
                wait_ready and "indexing" in reply.json()["answer"]
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError("server never became healthy:\n" + "".join(server.output))


def read_sse(lines: Any) -> list[dict[str, Any]]:
    """Parse an iterator of SSE text lines into ``[{event, id, data}]`` (comments skipped)."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    for line in lines:
        if line == "":
            if current:
                events.append(current)
                current = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        current[name] = json.loads(value) if name == "data" else value
    if current:
        events.append(current)
    return events


def until(check: Any, timeout: float = 30.0, pause: float = 0.05) -> Any:
    """Call ``check`` until it answers something true (answered), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(pause)
    raise AssertionError("condition not reached in time")
