"""Two real servers and the CLI, for the sync tests."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from serverproc import ServerProcess

ARTIFACT_CMD = (
    "echo logged-by-command; echo hello > out.txt; mkdir -p sub; "
    "head -c 300000 /dev/urandom > sub/data.bin"
)


def run_task(srv: ServerProcess, task: str, **inputs: Any) -> dict[str, Any]:
    """Submit and wait; the final status."""
    answer = srv.call("submit", task=task, **inputs)["answer"]
    final = srv.call(
        "wait_task", task_id=answer["task_id"], run_id=answer["run_id"], poll_interval=0.05
    )
    assert final["answer"]["state"] == "succeeded", final
    return final["answer"]


def push_cli(
    sender: ServerProcess, receiver: ServerProcess, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "runyard", "sync", "push", "--json",
        "--workspace-dir", str(sender.workspace), "--log-dir", str(sender.log_dir),
        "--url", receiver.url, "--token", str(receiver.token), *args,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=100, cwd=sender.root)
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def push_json(sender: ServerProcess, receiver: ServerProcess, *args: str) -> dict[str, Any]:
    return json.loads(push_cli(sender, receiver, *args).stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def task_dir(srv: ServerProcess, task_id: str) -> Path:
    return srv.workspace / task_id.split("#", 1)[0] / task_id


def eventually(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)
