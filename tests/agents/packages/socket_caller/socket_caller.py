"""A test agent that is always in the middle of a Job API call over its socket.

It submits a ``command`` task that sleeps for an hour, writes out/calling once, then calls
``wait_task`` on it (a call that does not end while the task runs) again and again. Prompt
``stay``: a call that fails (the server stopping) is tried again at once, forever; prompt
``leave``: the first call that fails ends the run.
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
        super().__init__("runyard", timeout=3600)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.socket_path)


def call(job: str, arguments: dict) -> dict:
    conn = UnixConnection(os.environ["RUNYARD_API_SOCKET"])
    headers = {
        "authorization": f"Bearer {os.environ['RUNYARD_API_TOKEN']}",
        "content-type": "application/json",
    }
    try:
        conn.request(
            "POST", f"/jobs/{job}", body=json.dumps({"arguments": arguments}), headers=headers
        )
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def main() -> None:
    handle = call("submit", {"task": "command", "command": "sleep 3600"})["answer"]
    wait = {"task_id": handle["task_id"], "run_id": handle["run_id"]}
    marked = False
    while True:
        try:
            if not marked:
                (WORKSPACE / "out" / "calling").write_text(handle["task_id"])
                marked = True
            if call("wait_task", wait).get("success") is not True:
                raise ValueError("the wait was cut short")
        except (OSError, http.client.HTTPException, ValueError):
            if CONTEXT["userPrompt"].strip() == "leave":
                return
            time.sleep(0.05)


if __name__ == "__main__":
    main()
