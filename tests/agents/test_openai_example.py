"""examples/openai-agent: a sandboxed run with network answers through an
OpenAI-compatible chat endpoint (a fake one on 127.0.0.1 here), with the key from
worker_env."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from serverproc import ServerProcess, start_server

EXAMPLE = Path(__file__).parents[2] / "examples" / "openai-agent"
KEY = "sk-test-6c0ffee-not-a-real-key"
CANNED = "The answer is **42**.\n\n- computed by the fake model"


class FakeOpenAI(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``: 401 without the right bearer key, else a canned
    completion; every request is recorded on the server."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        seen: list[dict[str, Any]] = self.server.seen  # type: ignore[attr-defined]
        seen.append({"path": self.path, "auth": self.headers.get("authorization"), **body})
        if self.headers.get("authorization") != f"Bearer {KEY}":
            self._answer(401, {"error": {"message": "bad key"}})
        elif self.path != "/v1/chat/completions":
            self._answer(404, {"error": {"message": "no such path"}})
        else:
            message = {"role": "assistant", "content": CANNED}
            completion = {"id": "chatcmpl-1", "object": "chat.completion",
                          "model": body["model"], "choices": [
                              {"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip
            self._answer(200, completion)

    def _answer(self, status: int, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    httpd.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def server_with(root: Path, endpoint: ThreadingHTTPServer, key: str) -> ServerProcess:
    packages = root / "packages"
    shutil.copytree(EXAMPLE, packages / "openai-agent")
    base_url = f"http://127.0.0.1:{endpoint.server_address[1]}/v1"
    config = {
        "agent_sandbox": "bwrap",
        "agent_network": True,
        "agent_packages_dir": str(packages),
        "worker_env": {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key,
                       "OPENAI_MODEL": "fake-model"},
    }  # fmt: skip
    return start_server(root / "srv", config=config)


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", "agent", *args], env=server.cli_env(),
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def test_the_example_answers_through_the_endpoint(
    tmp_path: Path, endpoint: ThreadingHTTPServer
) -> None:
    server = server_with(tmp_path, endpoint, KEY)
    try:
        session = cli(server, "create-session", "--title", "model").stdout.strip()
        done = cli(server, "run", "--session", session, "--package", "openai-agent",
                   "--system", "Be brief.", "What is six times seven?", "--wait")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.endswith("\n\n" + CANNED + "\n"), done.stdout
        assert " succeeded\n" in done.stdout and "isolation" not in done.stdout
        with server.client() as client:
            history = client.get(f"/api/v1/sessions/{session}").json()["history"]
            run_id = history[-1]["runId"]
            run = client.get(f"/api/v1/runs/{run_id}").json()
            events = client.get(f"/api/v1/runs/{run_id}/events").text
    finally:
        server.stop()
    assert run["isolation"] == "bwrap" and run["state"] == "succeeded"
    assert [turn["content"] for turn in history] == ["What is six times seven?", CANNED]
    request = endpoint.seen[-1]  # type: ignore[attr-defined]
    assert request["path"] == "/v1/chat/completions" and request["model"] == "fake-model"
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is six times seven?"},
    ]
    assert KEY not in events and KEY not in done.stdout + done.stderr  # the key is never shown


def test_a_wrong_key_fails_the_run_with_the_endpoints_answer(
    tmp_path: Path, endpoint: ThreadingHTTPServer
) -> None:
    server = server_with(tmp_path, endpoint, "sk-wrong-key")
    try:
        session = cli(server, "create-session").stdout.strip()
        done = cli(server, "run", "--session", session, "--package", "openai-agent", "hi",
                   "--wait")  # fmt: skip
    finally:
        server.stop()
    assert done.returncode == 1
    assert "answered HTTP 401" in done.stdout and " failed " in done.stdout
    assert "sk-wrong-key" not in done.stdout
