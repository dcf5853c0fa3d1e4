"""Idempotency-Key: a retried submit or run answers the first, never runs twice."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from reliability_helpers import status_of, until

from runyard.client import Client
from serverproc import ServerProcess, start_server

DEMO = {"arguments": {"task": "demo", "x": 1, "y": 2}}


def _submit(server: ServerProcess, key: str, body: dict = DEMO) -> httpx.Response:  # type: ignore[type-arg]
    with server.client() as http:
        return http.post("/jobs/submit", json=body, headers={"Idempotency-Key": key})


def _task_ids(server: ServerProcess) -> list[str]:
    return sorted(server.call("list_task_ids")["answer"])


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server for the tests that neither kill nor restart it."""
    server = start_server(tmp_path_factory.mktemp("shared"), config={"agent_sandbox": "none"})
    try:
        yield server
    finally:
        server.stop()


def test_same_key_answers_the_first_submit_across_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    try:
        first = _submit(server, "key-1")
        assert first.status_code == 200 and first.json()["success"] is True
        again = _submit(server, "key-1")
        assert again.json() == first.json()
        assert _task_ids(server) == [first.json()["answer"]["task_id"]]
        other = _submit(server, "key-1", {"arguments": {"task": "demo", "x": 5, "y": 2}})
        assert other.status_code == 409
        assert other.json()["success"] is False and "Idempotency-Key" in other.json()["answer"]
        bad = _submit(server, "")
        assert bad.status_code == 422
    finally:
        server.stop(signal.SIGKILL)
    server = start_server(tmp_path / "srv")
    try:
        after = _submit(server, "key-1")
        assert after.json() == first.json()  # kept on disk, not in memory
        assert len(_task_ids(server)) == 1
    finally:
        server.stop()


def test_a_submit_whose_answer_was_lost_to_a_kill_is_not_run_again(tmp_path: Path) -> None:
    """The server dies after making the task, before keeping the key's answer."""
    server = start_server(tmp_path / "srv", env={"RUNYARD_FAULT_POINT": "idempotency.answer"})
    with pytest.raises(httpx.TransportError), server.client() as http:
        http.post("/jobs/submit", json=DEMO, headers={"Idempotency-Key": "lost"})
    server.proc.wait(30)
    server.stop(keep_runs=True)
    server = start_server(tmp_path / "srv")
    try:
        made = _task_ids(server)
        assert len(made) == 1  # the first attempt did create it
        retry = _submit(server, "lost")
        assert retry.status_code == 200 and retry.json()["answer"]["task_id"] == made[0]
        assert _task_ids(server) == made
        final = until(lambda: status_of(server, made[0])["state"] == "succeeded" and 1)
        assert final
    finally:
        server.stop()


class _LosingProxy:
    """A TCP proxy that forwards the first request but never returns its answer."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.dropped = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        lose = self.dropped == 0
        self.dropped += lose
        threading.Thread(target=_copy, args=(client, upstream), daemon=True).start()
        if lose:
            upstream.recv(65536)  # the answer arrives... and is lost with the connection
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            return
        _copy(upstream, client)

    def close(self) -> None:
        self.listener.close()


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_the_client_retries_a_lost_submit_with_its_key_and_runs_it_once(
    shared: ServerProcess,
) -> None:
    before = _task_ids(shared)
    proxy = _LosingProxy(shared.url)
    try:
        with Client(proxy.url, token=shared.token, timeout=30) as client:
            handle = client.submit("demo", x=1, y=2)
        assert proxy.dropped == 1
        assert _task_ids(shared) == sorted([*before, handle.task_id])  # answered once, made once
    finally:
        proxy.close()


def test_runs_take_an_idempotency_key(shared: ServerProcess) -> None:
    with httpx.Client(base_url=shared.url + "/api/v1", headers=shared.headers) as http:
        session = http.post("/sessions", json={"title": "t"}).json()["id"]
        body = {"sessionId": session, "userPrompt": "hello"}
        key = {"Idempotency-Key": "run-1"}
        first = http.post("/runs", json=body, headers=key)
        assert first.status_code == 201, first.text
        again = http.post("/runs", json=body, headers=key)
        assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
        assert len(http.get("/runs", params={"sessionId": session}).json()["items"]) == 1
        other = http.post("/runs", json={**body, "userPrompt": "other"}, headers=key)
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "conflict"


def test_a_run_whose_answer_was_lost_to_a_kill_is_not_made_again(tmp_path: Path) -> None:
    """The server dies after making the run, before keeping the key's answer: the retry
    finds that run by the id reserved under the key, and makes no second one."""
    config = {"agent_sandbox": "none"}
    server = start_server(
        tmp_path / "srv", config=config, env={"RUNYARD_FAULT_POINT": "idempotency.answer"}
    )
    with server.client() as http:  # a request without a key never reaches the fault point
        session = http.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
    body = {"sessionId": session, "userPrompt": "hello"}
    key = {"Idempotency-Key": "lost-run"}
    with pytest.raises(httpx.TransportError), server.client() as http:
        http.post("/api/v1/runs", json=body, headers=key)
    server.proc.wait(30)
    server.stop(keep_runs=True)
    server = start_server(tmp_path / "srv", config=config)
    try:
        with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers) as http:
            made = http.get("/runs", params={"sessionId": session}).json()["items"]
            assert len(made) == 1  # the first attempt did create it
            retry = http.post("/runs", json=body, headers=key)
            assert retry.status_code == 201, retry.text
            assert retry.json()["id"] == made[0]["id"]
            assert len(http.get("/runs", params={"sessionId": session}).json()["items"]) == 1
    finally:
        server.stop()
