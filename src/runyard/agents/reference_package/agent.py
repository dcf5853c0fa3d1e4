"""runyard's reference agent: one pass through every contract of an agent run.

1. read ``in/run-context.json`` and every input artifact (checking its sha256);
2. keep a checkpoint in the session's state folder (``state/checkpoints/reference.json``
   and a SQLite journal in ``state/checkpoint-db/``), so the next run of the session
   continues from it;
3. call the Task Job API with the run token — through the Unix socket
   (``$RUNYARD_API_SOCKET``) or, when the run has none (a pod on a cluster), over TCP at
   ``$RUNYARD_API_URL`` — submit a ``demo`` task and wait for it;
4. write ``out/final-answer.md`` (the answer folded into the session history) and
   ``out/report.json``.

Standard library only; no network beyond the runyard API.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import sqlite3
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

WORKSPACE = Path(os.environ.get("RUNYARD_WORKSPACE", "/workspace"))
CONTEXT = Path(os.environ.get("RUNYARD_CONTEXT", str(WORKSPACE / "in" / "run-context.json")))
STATE = Path(os.environ.get("RUNYARD_STATE_DIR", str(WORKSPACE / "state")))


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the runyard API socket."""

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        super().__init__("runyard", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class JobRefused(RuntimeError):
    """The server refused the call (HTTP 403), e.g. a run without a sandbox may not submit."""


def api_connection() -> http.client.HTTPConnection:
    """The run's way to the API: its socket, else the URL it was given."""
    socket_path = os.environ.get("RUNYARD_API_SOCKET")
    if socket_path:
        return UnixConnection(socket_path)
    url = urllib.parse.urlsplit(os.environ["RUNYARD_API_URL"])
    if url.scheme == "https":
        return http.client.HTTPSConnection(url.netloc, timeout=120.0)
    return http.client.HTTPConnection(url.netloc, timeout=120.0)


def call_job(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """POST /jobs/<name> with the run token; the JobResponse."""
    conn = api_connection()
    body = json.dumps({"arguments": arguments})
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {os.environ['RUNYARD_API_TOKEN']}",
    }
    try:
        conn.request("POST", f"/jobs/{name}", body=body, headers=headers)
        reply = conn.getresponse()
        payload = reply.read()
    finally:
        conn.close()
    if reply.status == 403:
        raise JobRefused(json.loads(payload).get("detail", "refused"))
    if reply.status != 200:
        raise RuntimeError(f"/jobs/{name} answered HTTP {reply.status}: {payload[:500]!r}")
    return json.loads(payload)


def read_inputs(context: dict[str, Any]) -> list[dict[str, Any]]:
    seen = []
    for entry in context.get("inputArtifacts", []):
        path = WORKSPACE / entry["path"]
        digest = hashlib.sha256()
        lines = 0
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
                lines += block.count(b"\n")
        seen.append(
            {
                "path": entry["path"],
                "size": path.stat().st_size,
                "lines": lines,
                "sha256Matches": digest.hexdigest() == entry["sha256"],
            }
        )
    return seen


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def update_checkpoint(context: dict[str, Any]) -> dict[str, Any]:
    checkpoint_path = STATE / "checkpoints" / "reference.json"
    previous: dict[str, Any] = {}
    if checkpoint_path.is_file():
        previous = json.loads(checkpoint_path.read_text(encoding="utf-8"))
    checkpoint = {
        "runCount": int(previous.get("runCount", 0)) + 1,
        "runIds": [*previous.get("runIds", []), context["runId"]],
        "previousRunId": previous.get("runIds", [None])[-1] if previous else None,
        "updatedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(checkpoint_path, json.dumps(checkpoint, indent=2))
    journal = sqlite3.connect(STATE / "checkpoint-db" / "reference.sqlite")
    with journal:
        journal.execute("CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, prompt TEXT)")
        journal.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?)", (context["runId"], context["userPrompt"])
        )
        checkpoint["journalRows"] = journal.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    journal.close()
    return checkpoint


def run_demo_task(x: int, y: int) -> dict[str, Any]:
    """Submit a demo task and wait for it; a refused submit is reported, not a failure."""
    try:
        submitted = call_job("submit", {"task": "demo", "x": x, "y": y})
    except JobRefused as exc:
        return {"taskId": None, "state": "refused", "result": None, "success": True,
                "reason": str(exc)}  # fmt: skip
    if not submitted.get("success"):
        raise RuntimeError(f"submit failed: {submitted.get('answer')}")
    handle = submitted["answer"]
    wait_arguments = {"task_id": handle["task_id"], "run_id": handle["run_id"]}
    waited = call_job("wait_task", {**wait_arguments, "poll_interval": 0.2})
    status = waited.get("answer") or {}
    return {
        "taskId": handle["task_id"],
        "state": status.get("state"),
        "result": (status.get("result") or {}).get("result"),
        "success": bool(waited.get("success")),
    }


def final_answer(context: dict[str, Any], inputs: list, checkpoint: dict, demo: dict) -> str:
    history = context.get("history", [])
    lines = [
        f"# Answer to: {context['userPrompt']}",
        "",
        f"- Run {context['runId']} of session {context['sessionId']}"
        f" (run {checkpoint['runCount']} of this session, isolation "
        f"{context['envFacts']['isolation']}).",
        f"- I saw {len(history)} earlier turns in the history.",
    ]
    # turns are user, assistant or system (a note such as a restored state folder)
    answers = [turn for turn in history if turn.get("role") == "assistant" and turn["content"]]
    if answers:
        lines.append(f"- The previous answer began: {answers[-1]['content'].splitlines()[0]}")
    for item in inputs:
        verdict = "sha256 ok" if item["sha256Matches"] else "sha256 MISMATCH"
        size, count = item["size"], item["lines"]
        lines.append(f"- Input {item['path']}: {size} bytes, {count} lines, {verdict}.")
    if demo["state"] == "refused":
        lines.append(f"- The server refused my demo task: {demo['reason']}")
    else:
        outcome = f"{demo['state']} with result {demo['result']}"
        lines.append(f"- The demo task {demo['taskId']} ended {outcome}.")
    return "\n".join(lines) + "\n"


def main() -> int:
    context = json.loads(CONTEXT.read_text(encoding="utf-8"))
    print(f"reference agent: run {context['runId']} prompt={context['userPrompt']!r}", flush=True)
    inputs = read_inputs(context)
    print(f"reference agent: read {len(inputs)} inputs", flush=True)
    checkpoint = update_checkpoint(context)
    print(f"reference agent: checkpoint run count {checkpoint['runCount']}", flush=True)
    x = checkpoint["runCount"]
    demo = run_demo_task(x, len(inputs))
    print(f"reference agent: demo task {demo['taskId']} {demo['state']}", flush=True)
    out = WORKSPACE / "out"
    report = {"inputs": inputs, "checkpoint": checkpoint, "demo": demo}
    write_atomic(out / "report.json", json.dumps(report, indent=2))
    write_atomic(out / "final-answer.md", final_answer(context, inputs, checkpoint, demo))
    print("reference agent: wrote out/final-answer.md", flush=True)
    return 0 if demo["success"] else 1


if __name__ == "__main__":
    sys.exit(main())
