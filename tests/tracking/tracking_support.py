"""A real server whose plugin is tests/tracking/tracking_tasks.py, for the tracking tests.

The plugin is a ``.dist-info`` folder written under the test's tmp_path (its
``entry_points.txt`` names the tasks) put on the server's ``PYTHONPATH`` with this folder:
nothing is installed, nothing is seen by another test.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tracking_tasks import TASKS

from serverproc import ServerProcess, start_server

HERE = Path(__file__).resolve().parent
ENDED = ("succeeded", "failed", "cancelled")


def plugin_path(root: Path) -> str:
    info = root / "plugin" / "runyard_tracking_tests-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: runyard-tracking-tests\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in TASKS.items())
    (info / "entry_points.txt").write_text("[runyard.tasks]\n" + lines)
    return f"{root / 'plugin'}:{HERE}"


def tracking_server(root: Path, **options: Any) -> ServerProcess:
    env = {"PYTHONPATH": plugin_path(root), **options.pop("env", {})}
    return start_server(root / "srv", token="tracking-secret", env=env, **options)


def submit(server: ServerProcess, task: str, **arguments: Any) -> dict[str, Any]:
    reply = server.call("submit", task=task, **arguments)
    assert reply["success"], reply
    return reply["answer"]


def wait_end(server: ServerProcess, task_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer = server.call("status", task_id=task_id)["answer"]
        if answer["state"] in ENDED:
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
