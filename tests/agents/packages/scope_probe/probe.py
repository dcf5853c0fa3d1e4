"""A test agent whose prompt is a JSON list of API calls ``[name, method, path, body]``.

Each call goes through the run's API socket with the run token; every answer (status code
and body) is written to ``out/replies.json`` under its name. The test judges them. A call
named ``hold`` instead writes the token to ``out/token`` and waits until the file
``state/<path>`` exists, so the test can use the token itself while the run lives.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("runyard", timeout=90)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.socket_path)


def call(method: str, path: str, body: object) -> dict[str, object]:
    conn = UnixConnection(os.environ["RUNYARD_API_SOCKET"])
    headers = {"authorization": f"Bearer {os.environ['RUNYARD_API_TOKEN']}"}
    payload = None
    if body is not None:
        payload = json.dumps(body)
        headers["content-type"] = "application/json"
    conn.request(method, path, body=payload, headers=headers)
    reply = conn.getresponse()
    raw = reply.read().decode("utf-8", "replace")
    conn.close()
    try:
        return {"status": reply.status, "body": json.loads(raw)}
    except ValueError:
        return {"status": reply.status, "body": raw}


def hold(release: str) -> None:
    (WORKSPACE / "out" / "token").write_text(os.environ["RUNYARD_API_TOKEN"], encoding="utf-8")
    deadline = time.monotonic() + 60
    while not (WORKSPACE / "state" / release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    replies: dict[str, object] = {}
    for name, method, path, body in json.loads(CONTEXT["userPrompt"]):
        if name == "hold":
            hold(path)
            continue
        try:
            replies[name] = call(method, path, body)
        except OSError as exc:
            replies[name] = {"status": 0, "body": f"{type(exc).__name__}: {exc}"}
    out = WORKSPACE / "out"
    (out / "replies.json").write_text(json.dumps(replies), encoding="utf-8")
    (out / "final-answer.md").write_text("done", encoding="utf-8")


main()
