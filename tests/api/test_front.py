"""The port answers before the app is built: /health at once, behind the Host check and auth;
every other call waits for the app, or is refused 503 with Retry-After past the wait."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from serverproc import ServerProcess, start_server

TASKS = 3


def write_tasks(workspace: Path) -> None:
    for n in range(TASKS):
        task_id = f"etl#load#t{n}"
        folder = workspace / "etl" / task_id
        folder.mkdir(parents=True)
        record = {
            "task_id": task_id, "run_id": f"{n:032x}", "task_type": "etl",
            "task_name": "load", "state": "succeeded", "config": {"task_name": f"t{n}"},
            "created_at": f"2026-03-01T10:00:0{n}Z", "started_at": None, "finished_at": None,
            "pid": None, "exit_code": 0, "error": "", "result": {"n": n}, "steps": [],
            "log_path": "",
        }  # fmt: skip
        (folder / "status.json").write_text(json.dumps(record))


def slow_build(root: Path, seconds: float) -> ServerProcess:
    write_tasks(root / "ws")
    delay = {"RUNYARD_FAULT_DELAY": f"serve.build:{seconds}"}
    return start_server(root, env=delay, wait_ready=False)


class Pending:
    """One request sent in a thread: whether it has been answered yet, and the answer."""

    def __init__(self, server: ServerProcess, path: str, headers: dict[str, str]) -> None:
        self.reply: httpx.Response | None = None
        self._thread = threading.Thread(target=self._send, args=(server, path, headers))
        self._thread.start()

    def _send(self, server: ServerProcess, path: str, headers: dict[str, str]) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            self.reply = client.post(path, json={"arguments": {}}, headers=headers)

    @property
    def answered(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> httpx.Response:
        self._thread.join(60)
        assert self.reply is not None
        return self.reply


def early_health(server: ServerProcess, **headers: str) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        return client.get("/health", headers=headers)


def test_health_answers_while_the_app_is_built_and_a_list_waits_for_it(tmp_path: Path) -> None:
    server = slow_build(tmp_path / "srv", 4.0)
    try:
        listed = Pending(server, "/jobs/list_task_ids", server.headers)
        stranger = Pending(server, "/jobs/list_task_ids", {})
        reply = early_health(server)
        assert not listed.answered, "the list was answered before the app was built"
        assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
        body: dict[str, Any] = reply.json()
        assert body["success"] is True and body["metadata"] == {}
        answer = body["answer"]
        assert answer["running"] is True and answer["indexing"] == {"done": 0, "total": 0}
        assert answer["storage"]["unwritten"] == 0 and answer["storage"]["low"] is False
        # the guard stands in front of the early answers too
        foreign = early_health(server, host="evil.example")
        assert foreign.status_code == 403, foreign.text
        with httpx.Client(base_url=server.url, timeout=10) as client:
            refused = client.post(
                "/jobs/list_task_ids", json={"arguments": {}},
                headers={**server.headers, "host": "evil.example"},
            )  # fmt: skip
        assert refused.status_code == 403, refused.text
        assert not listed.answered, "the build ended before the test could see it"

        assert listed.result().status_code == 200
        assert sorted(listed.result().json()["answer"]) == [f"etl#load#t{n}" for n in range(3)]
        assert stranger.result().status_code == 401  # the app's auth, once built
        assert server.stop() == 0
    finally:
        server.stop()


def test_a_call_past_the_wait_is_refused_503_with_retry_after(tmp_path: Path) -> None:
    server = slow_build(tmp_path / "srv", 14.0)  # longer than startup.WAIT_SECONDS (10)
    try:
        started = time.monotonic()
        job = Pending(server, "/jobs/list_task_ids", server.headers)
        api = Pending(server, "/api/v1/tasks", server.headers)
        stranger = Pending(server, "/jobs/list_task_ids", {})
        # a run's token cannot be checked before the services exist: "retry" is the answer,
        # except where only the server token opens (/metrics)
        unchecked = Pending(server, "/jobs/list_task_ids", {"authorization": "Bearer not-yet"})
        metrics = Pending(server, "/metrics", {"authorization": "Bearer not-yet"})
        assert early_health(server).status_code == 200
        refused = job.result()
        assert time.monotonic() - started < 14.0, "answered only once the app was built"
        assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
        assert refused.json()["success"] is False
        assert "The server is starting" in refused.json()["answer"]
        # /api/v1 answers its own error object; the route is GET, the method is checked later
        assert api.result().status_code == 503
        assert api.result().json()["error"]["code"] == "starting"
        assert stranger.result().status_code == 401  # the refusal is behind auth too
        assert unchecked.result().status_code == 503
        assert metrics.result().status_code == 401
        # stopped while the app is still being built: a clean end, its address removed (the
        # token stays for the next start)
        assert server.stop() == 0
        assert json.loads((server.workspace / "server.json").read_text()) == {"token": server.token}
    finally:
        server.stop()


def test_what_runs_before_the_port_listens_imports_no_app() -> None:
    # serve's own module and the front: no FastAPI, no routes, no record models, no services
    probe = (
        "import sys, runyard.api.server\n"
        "heavy = ('fastapi', 'runyard.api.app', 'runyard.api.services', "
        "'runyard.repository', 'runyard.runtime.supervisor', 'runyard.api.errormap')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
