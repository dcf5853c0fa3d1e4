"""Helpers for the agent API over a real server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from agent_support import PACKAGES

from serverproc import ServerProcess, start_server


def agent_server(root: Path, mode: str, **config: Any) -> ServerProcess:
    values = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": mode}
    values.update(config)
    return start_server(root, config=values, token=values.pop("token", None))


def api(server: ServerProcess, timeout: float = 60.0) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=timeout)


def error_of(reply: httpx.Response, status: int) -> dict[str, str]:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]  # type: ignore[no-any-return]


def new_session(client: httpx.Client, title: str = "t") -> str:
    reply = client.post("/sessions", json={"title": title})
    assert reply.status_code == 201, reply.text
    return reply.json()["id"]  # type: ignore[no-any-return]


def upload(
    client: httpx.Client, session_id: str, data: bytes, name: str = "prices.csv",
    relative_path: str | None = None,
) -> httpx.Response:  # fmt: skip
    fields = {"sessionId": session_id}
    if relative_path is not None:
        fields["relativePath"] = relative_path
    return client.post("/artifacts/upload", data=fields, files={"file": (name, data, "text/csv")})


def create_run(client: httpx.Client, session_id: str, prompt: str, **extra: Any) -> dict[str, Any]:
    reply = client.post("/runs", json={"sessionId": session_id, "userPrompt": prompt, **extra})
    assert reply.status_code == 201, reply.text
    return reply.json()  # type: ignore[no-any-return]


def wait_run(client: httpx.Client, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/runs/{run_id}").json()
        if run["state"] in ("succeeded", "failed", "cancelled"):
            return run  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish")


def wait_file(client: httpx.Client, run_id: str, path: str, timeout: float = 30.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = client.get(f"/runs/{run_id}/files/{path}")
        if reply.status_code == 200:
            return reply.content
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} wrote no {path}")


def raw_upload(
    client: httpx.Client, session_id: str, disposition_name: bytes, relative_path: bytes = b""
) -> httpx.Response:
    """A multipart body written by hand, to send names a client library would escape."""
    boundary = b"rawBoundary42"
    body = (
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="sessionId"\r\n\r\n'
        + session_id.encode() + b"\r\n"
        + b"--" + boundary + b'\r\nContent-Disposition: form-data; name="relativePath"\r\n\r\n'
        + relative_path + b"\r\n"
        + b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="'
        + disposition_name + b'"\r\n\r\nabc\r\n--' + boundary + b"--\r\n"
    )  # fmt: skip
    headers = {"content-type": "multipart/form-data; boundary=rawBoundary42"}
    return client.post("/artifacts/upload", content=body, headers=headers)
