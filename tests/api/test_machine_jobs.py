"""``machine_status`` and ``list_machines`` through a real server: the hostile and broken
targets ``list_machines`` must report unhealthy within its timeout, without following
them elsewhere or showing their credentials; bad arguments; a run token refused."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from runyard.agents.models import RunScope
from runyard.api import job_args as a
from runyard.api.machine_jobs import MACHINE_JOBS
from runyard.client import Client
from runyard.config import Settings
from runyard.errors import Forbidden
from runyard.machine.metrics import machine_info
from runyard.machine.models import MachineHealth, MachineInfo
from serverproc import start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
from api_helpers import agent_server, api, create_run, new_session, wait_run  # noqa: E402

TIMEOUT = 2.0
STATUS = {"answer": machine_info().model_dump(mode="json"), "success": True, "metadata": {}}


class FakeTarget(BaseHTTPRequestHandler):
    """A machine answering ``machine_status`` as the first path segment says."""

    seen_auth: list[str] = []  # Authorization headers the redirect's destination received

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        mode = urlsplit(self.path).path.strip("/").split("/")[0]
        getattr(self, f"answer_{mode}")()

    def send(self, body: bytes, status: int = 200, **headers: str) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def answer_valid(self) -> None:
        self.send(json.dumps(STATUS).encode())

    answer_also = answer_valid

    def answer_collector(self) -> None:
        FakeTarget.seen_auth.append(self.headers.get("authorization", ""))
        self.answer_valid()

    def answer_huge(self) -> None:  # a valid status padded past the bound
        self.send(json.dumps(STATUS).encode() + b" " * (2 << 20))

    def answer_shape(self) -> None:
        self.send(json.dumps({"success": True, "answer": {"axonx": {"version": "1"}}}).encode())

    def answer_failed(self) -> None:
        self.send(json.dumps({**STATUS, "success": False}).encode())

    def answer_deep(self) -> None:
        self.send(b"[" * 100_000 + b"]" * 100_000)

    def answer_gzip(self) -> None:  # says gzip, is not
        self.send(b"\x1f\x8b not really gzip", **{"content-encoding": "gzip"})

    def answer_refused(self) -> None:
        self.send(json.dumps(STATUS).encode(), status=403)

    def answer_redirect(self) -> None:
        where = f"http://127.0.0.1:{self.server.server_address[1]}/collector/jobs/machine_status"
        self.send(b"{}", status=307, location=where)

    def answer_trickle(self) -> None:
        """Headers at once, then a byte every 0.1 s: no single read ever waits long."""
        body = json.dumps(STATUS).encode() + b" " * 1000
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        for i in range(len(body)):
            try:
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.1)


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeTarget)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def test_list_machines_reports_each_broken_target_unhealthy_in_time(
    fake: str, tmp_path: Path
) -> None:
    """One valid target among hostile and broken ones: a silent listener, a slow trickle,
    an oversized, a misshapen, a failed, a too-deep, a corrupt and a refused answer, a
    redirect to a collector of tokens, a closed port, a URL that is none. Only the valid
    one is healthy, the call ends within the one timeout (the checks run at once), no token
    reaches the redirect's target and no credential of a URL is shown."""
    silent = socket.create_server(("127.0.0.1", 0))  # connects, never answers
    FakeTarget.seen_auth.clear()
    modes = ["valid", "huge", "shape", "failed", "deep", "gzip", "refused", "redirect", "trickle"]
    targets: dict[str, Any] = {m: {"url": f"{fake}/{m}", "token": f"tok-{m}"} for m in modes}
    targets["silent"] = {"url": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    targets["closed"] = {"url": f"http://127.0.0.1:{closed_port()}"}
    targets["nonsense"] = {"url": "::not a url::"}
    targets["secret"] = {"url": fake.replace("//", "//user:pw-in-url@") + "/also?key=qs-secret#f"}
    srv = start_server(
        tmp_path, config={"targets": targets, "machine_check_timeout_seconds": TIMEOUT}
    )
    try:
        started = time.monotonic()
        rows = srv.call("list_machines", timeout=30)["answer"]
        took = time.monotonic() - started
    finally:
        srv.stop()
        silent.close()
    assert took < TIMEOUT + 1.5, took
    health = {row["address"]: row["healthy"] for row in rows}
    assert len(rows) == len(targets) == len(health)
    expected = {f"{fake}/{m}": m == "valid" for m in modes}
    expected[targets["silent"]["url"]] = False
    expected[targets["closed"]["url"]] = False
    expected["nonsense"] = False  # no address to show: its name
    expected[f"{fake}/valid"] = True
    secret = next(address for address in health if address not in expected)
    assert "pw-in-url" not in secret and "qs-secret" not in secret and "user" not in secret
    assert secret == f"{fake}/also" and health.pop(secret) is True
    assert health == expected
    assert FakeTarget.seen_auth == []  # the redirect was not followed with tok-redirect


def test_no_targets_is_an_empty_list_the_client_types_both_and_bad_arguments_are_422(
    tmp_path: Path,
) -> None:
    srv = start_server(tmp_path)
    try:
        assert srv.call("list_machines")["answer"] == []
        status = srv.call("machine_status")["answer"]
        assert set(status) == {"axonx", "cpu", "memory", "gpus"} and status["gpus"] == []
        with Client(srv.url, srv.token) as client:  # runyard's own client, typed answers
            info = client.call_job("machine_status", MachineInfo)
            assert isinstance(info, MachineInfo) and info.memory.total_bytes > 0
            assert client.call_job("list_machines", list[MachineHealth]) == []
        with srv.client() as client:
            for job in ("machine_status", "list_machines"):
                for bad in ("x", [1], 3):
                    reply = client.post(f"/jobs/{job}", json={"arguments": bad})
                    assert reply.status_code == 422, reply.text
                    assert "arguments" in reply.text
    finally:
        srv.stop()


def test_a_setting_out_of_bounds_is_refused_at_start() -> None:
    for bad in (0, -1, 61, "soon"):
        with pytest.raises(ValueError, match="machine_check_timeout_seconds"):
            Settings(machine_check_timeout_seconds=bad)


@pytest.mark.parametrize("job", MACHINE_JOBS, ids=lambda job: job.name)
def test_the_handlers_refuse_a_run_scope_themselves(job: Any) -> None:
    """Whatever route reaches them: a run's scope is refused before anything is read."""
    scope = RunScope(session_id="s", run_id="r")
    with pytest.raises(Forbidden, match="admin"):
        asyncio.run(job.run(None, a.NoArguments(), None, scope))


def test_a_run_token_is_refused_both_jobs(tmp_path: Path) -> None:
    """A run inside the server calls both with its own token and gets 403, while the
    server token gets answers."""
    server = agent_server(tmp_path / "srv", "none", targets={"self": {"url": "http://127.0.0.1:9"}})
    try:
        calls = [
            [name, "POST", f"/jobs/{name}", {"arguments": {}}]
            for name in ("machine_status", "list_machines")
        ]
        with api(server, timeout=120) as client:
            session = new_session(client, "machines")
            run = create_run(client, session, json.dumps(calls), package="scope_probe")
            done = wait_run(client, run["id"], timeout=90)
            assert done["state"] == "succeeded", done
            replies = client.get(f"/runs/{run['id']}/files/replies.json").json()
        for name in ("machine_status", "list_machines"):
            assert replies[name]["status"] == 403, replies[name]
            assert "admin" in json.dumps(replies[name]["body"]), replies[name]
        assert server.call("list_machines")["answer"] == [
            {"address": "http://127.0.0.1:9", "healthy": False}
        ]
    finally:
        server.stop()
