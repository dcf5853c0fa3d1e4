"""What the retry tests share: a task that fails until its n-th attempt, and reading a
task's end, its attempts and its runs through a real server."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serverproc import ServerProcess, until

# counts its attempts in a file outside the task folder; fails before attempt {ok}
FLAKY = 'n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}; ' \
    'echo "attempt $n"; [ $n -ge {ok} ]'  # fmt: skip
ENDED = ("succeeded", "failed", "cancelled")
TOKEN = "retry-secret"


def status(server: ServerProcess, task_id: str) -> dict[str, Any]:
    return server.call("status", task_id=task_id)["answer"]  # type: ignore[no-any-return]


def finished(server: ServerProcess, task_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """The task's end: its last attempt's (a failed one with retries left is not one)."""

    def final() -> dict[str, Any] | None:
        found = status(server, task_id)
        retried = (
            found["state"] == "failed"
            and found.get("attempt", 1) <= found.get("retries", 0)
            and not found["error"].startswith("upstream failed: ")  # never ran: not retried
        )
        return found if found["state"] in ENDED and not retried else None

    return until(final, timeout)  # type: ignore[no-any-return]


def flaky(
    server: ServerProcess, name: str, counter: Path, ok: int, **submit: Any
) -> dict[str, Any]:
    command = FLAKY.format(counter=counter, ok=ok)
    return server.call(  # type: ignore[no-any-return]
        "submit", task="command", task_name=name, command=command, shell=True, **submit
    )["answer"]


def attempts(counter: Path) -> int:
    return int(counter.read_text()) if counter.exists() else 0


def runs(server: ServerProcess, task_id: str) -> list[dict[str, Any]]:
    shown = subprocess.run(
        [sys.executable, "-m", "runyard", "runs", task_id, "--json"],
        env=server.cli_env(), capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return list(json.loads(shown)["runs"])


def seconds(iso: str) -> float:
    """The epoch seconds of a record's UTC time."""
    when = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ")
    return when.replace(tzinfo=UTC).timestamp()
