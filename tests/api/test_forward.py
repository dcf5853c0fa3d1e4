"""`target` forwards a call to a configured remote runyard: two real servers."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from runyard.api import forward
from runyard.config import Target
from serverproc import read_sse, start_server


def test_forwarding_between_two_servers(tmp_path: Path) -> None:
    remote = start_server(tmp_path / "remote", token="remote-token")
    local = None
    try:
        config = {
            "targets": {
                "lab": {"url": remote.url, "token": "remote-token"},
                "dead": {"url": "http://127.0.0.1:9"},
            }
        }
        local = start_server(tmp_path / "local", config=config)
        with local.client() as client:
            handle = client.post(
                "/jobs/submit",
                json={
                    "target": "lab",
                    "arguments": {"task": "demo", "task_name": "fwd", "x": 2, "y": 3},
                },
            ).json()
            assert handle["success"] is True and handle["answer"]["task_id"] == "base#demo#fwd"
            final = client.post(
                "/jobs/wait_task",
                json={
                    "target": "lab",
                    "arguments": {
                        **{k: handle["answer"][k] for k in ("task_id", "run_id")},
                        "poll_interval": 0.05,
                    },
                },
            ).json()
            assert final["answer"]["result"]["result"] == 5
            events = read_sse(
                client.post(
                    "/jobs/stream_task/events",
                    json={"target": "lab", "arguments": {"task_id": "base#demo#fwd"}},
                ).text.splitlines()
            )
            assert events[-1]["event"] == "result" and events[-1]["data"]["success"] is True
            unknown = client.post(
                "/jobs/status", json={"target": "nope", "arguments": {"task_id": "base#demo#fwd"}}
            )
            assert unknown.status_code == 422 and "nope" in unknown.json()["detail"]
            dead = client.post(
                "/jobs/status", json={"target": "dead", "arguments": {"task_id": "base#demo#fwd"}}
            )
            assert dead.status_code == 502
        assert (remote.workspace / "base" / "base#demo#fwd" / "metadata.json").exists()
        assert not (local.workspace / "base" / "base#demo#fwd").exists()
        local_status = httpx.post(
            local.url + "/jobs/status",
            json={"arguments": {"task_id": "base#demo#fwd"}},
            headers=local.headers,
        ).json()
        assert local_status["success"] is False
    finally:
        remote.stop()
        if local is not None:
            local.stop()


def test_https_targets_share_one_verifying_context_made_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forwarded call makes its client on the event loop: the CA bundle of an https
    target's TLS context (16 ms of CPU) is loaded once for the server's life, and the
    context still verifies; an http target loads none."""
    made: list[str] = []
    real = ssl.create_default_context

    def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append("trusted certificates")
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", create_default_context)
    forward._verifying.cache_clear()
    clients = [forward._client(Target(url="http://127.0.0.1:9"))]
    assert made == []
    clients += [forward._client(Target(url="https://127.0.0.1:9")) for _ in range(3)]
    assert made == ["trusted certificates"]
    context = forward._verifying()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname

    async def close() -> None:
        for client in clients:
            await client.aclose()

    asyncio.run(close())
