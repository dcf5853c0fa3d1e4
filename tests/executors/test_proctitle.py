"""Process titles: ``ps`` names the server by its workspace and each worker by its task."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from serverproc import ServerProcess, start_server


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def wait_running(server: ServerProcess, task_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = server.call("status", task_id=task_id)["answer"]
        if status["state"] == "running" and status.get("pid"):
            return status
        assert status["state"] in ("queued", "running"), status
        time.sleep(0.05)
    raise AssertionError(f"{task_id} never ran")


def test_ps_names_the_server_and_a_running_worker_by_its_task(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    try:
        assert cmdline(server.proc.pid) == [f"runyard serve {server.workspace}"]
        secret = "input-marker-7c1d"
        handle = server.call(
            "submit", task="command", command=f"sh -c 'sleep 60' {secret}", task_name="titled"
        )["answer"]
        status = wait_running(server, handle["task_id"])
        title = cmdline(status["pid"])
        assert title == [f"runyard task {status['task_type']} {handle['task_id']}"], title
        assert secret not in " ".join(title)  # inputs stay off the command line
        server.call("cancel", task_id=handle["task_id"])
    finally:
        server.stop()
