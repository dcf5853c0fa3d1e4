"""A test agent whose prompt is a script, one command a line; results go to out/probes.json.

sleep SECONDS          wait
wait-for NAME          wait until state/NAME exists (a file the test creates)
answer TEXT            write TEXT to out/final-answer.md
huge BYTES             write an answer of BYTES bytes ('x' then a multi-byte tail)
write PATH TEXT        try to write TEXT to PATH (absolute, or relative to the workspace)
append PATH TEXT       try to append TEXT to PATH
read PATH              try to read PATH
listdir PATH           try to list PATH
checkpoint             count this run in state/checkpoints/probe.json
job                    submit a demo task through the API and wait for it
api METHOD PATH        call the runyard API with the run token (its socket, else its URL)
exit CODE              exit with CODE now
spawn SECONDS          start a background process that sleeps (it must die with the run)
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))
RESULTS: list[dict] = []


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("runyard", timeout=60)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.socket_path)


def connect() -> http.client.HTTPConnection:
    if os.environ.get("RUNYARD_API_SOCKET"):
        return UnixConnection(os.environ["RUNYARD_API_SOCKET"])
    return http.client.HTTPConnection(urlsplit(os.environ["RUNYARD_API_URL"]).netloc, timeout=60)


def api(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    conn = connect()
    headers = {"authorization": f"Bearer {os.environ['RUNYARD_API_TOKEN']}"}
    payload = None
    if body is not None:
        payload = json.dumps(body)
        headers["content-type"] = "application/json"
    conn.request(method, path, body=payload, headers=headers)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    try:
        return reply.status, json.loads(data)
    except ValueError:
        return reply.status, data.decode("utf-8", "replace")


def resolve(path: str) -> Path:
    return Path(path) if path.startswith("/") else WORKSPACE / path


def attempt(command: str, action) -> None:
    try:
        RESULTS.append({"command": command, "ok": True, "value": action()})
    except Exception as exc:  # the probe reports, the test judges
        RESULTS.append({"command": command, "ok": False, "error": f"{type(exc).__name__}: {exc}"})


def write(path: Path, text: str, mode: str = "w") -> str:
    with open(path, mode, encoding="utf-8") as fh:
        fh.write(text)
    return "written"


def job() -> object:
    status, submitted = api("POST", "/jobs/submit", {"arguments": {"task": "demo", "x": 1, "y": 2}})
    handle = submitted["answer"]
    wait = {"task_id": handle["task_id"], "run_id": handle["run_id"], "poll_interval": 0.1}
    _, waited = api("POST", "/jobs/wait_task", {"arguments": wait})
    return waited["answer"]["result"]


def checkpoint() -> int:
    path = WORKSPACE / "state" / "checkpoints" / "probe.json"
    count = json.loads(path.read_text())["count"] + 1 if path.exists() else 1
    path.write_text(json.dumps({"count": count}))
    return count


def wait_for(name: str) -> None:
    while not (WORKSPACE / "state" / name).exists():
        time.sleep(0.05)


def spawn(seconds: str) -> None:
    proc = subprocess.Popen(["sleep", seconds], start_new_session=True)
    (WORKSPACE / "out" / "spawned.pid").write_text(str(proc.pid))


def child(seconds: str) -> None:
    """A child in the run's own process group (no setsid): the group kill must reach it."""
    proc = subprocess.Popen(["sleep", seconds])
    (WORKSPACE / "out" / "child.pid").write_text(str(proc.pid))


def leave(code: str) -> None:
    save()
    sys.exit(int(code))


def token() -> None:
    # whole or not at all: a test polling for the file must never read it half written
    out = WORKSPACE / "out"
    (out / ".token.part").write_text(os.environ["RUNYARD_API_TOKEN"])
    os.replace(out / ".token.part", out / "token")


def answer(text: str) -> None:
    write(WORKSPACE / "out" / "final-answer.md", text)


def huge(size: str) -> None:
    answer("x" * (int(size) - 3) + "\u20ac")


PLAIN = {"sleep": lambda a, r: time.sleep(float(a)), "wait-for": lambda a, r: wait_for(a),
         "answer": lambda a, r: answer(r), "huge": lambda a, r: huge(a),
         "spawn": lambda a, r: spawn(a), "child": lambda a, r: child(a), "exit": lambda a, r: leave(a),
         "token": lambda a, r: token()}  # fmt: skip
PROBES = {
    "write": lambda arg, text: write(resolve(arg), text),
    "append": lambda arg, text: write(resolve(arg), text, "a"),
    "read": lambda arg, text: resolve(arg).read_text(encoding="utf-8", errors="replace")[:200],
    "listdir": lambda arg, text: sorted(os.listdir(resolve(arg))),
    "checkpoint": lambda arg, text: checkpoint(),
    "job": lambda arg, text: job(),
    "api": lambda arg, text: api(arg, text),
}


def run_line(line: str) -> None:
    verb, _, rest = line.strip().partition(" ")
    arg, _, text = rest.partition(" ")
    if verb in PLAIN:
        PLAIN[verb](arg, rest)
    elif verb in PROBES:
        attempt(line, lambda: PROBES[verb](arg, text))
    else:
        raise SystemExit(f"probe: unknown command {verb!r}")


def save() -> None:
    out = WORKSPACE / "out" / "probes.json"
    ids = {"uid": os.getuid(), "gid": os.getgid()}
    saved = {"context": CONTEXT, "env": dict(os.environ), "results": RESULTS, **ids}
    out.write_text(json.dumps(saved))


def main() -> None:
    print(f"probe {CONTEXT['runId']} starts", flush=True)
    for line in CONTEXT["userPrompt"].splitlines():
        if line.strip():
            print(f"probe: {line}", flush=True)
            run_line(line)
    save()
    print("probe done", flush=True)


if __name__ == "__main__":
    main()
