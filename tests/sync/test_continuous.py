"""Continuous sync: each finished task is pushed; while the target is down the outbox keeps
it (across a server restart too) and retries until the target is back."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families
from sync_helpers import eventually, run_task, sha256, task_dir

from serverproc import ServerProcess, start_server


class Relay:
    """A TCP relay on a fixed loopback port: the target's address, up only when started."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.listener: socket.socket | None = None

    def start(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def outbox_depth_metric(server: ServerProcess) -> float:
    with server.client() as http:
        text = http.get("/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "runyard_sync_outbox_depth":
            return float(family.samples[0].value)
    raise AssertionError("no runyard_sync_outbox_depth in /metrics")


def test_continuous_sync_waits_out_a_down_target_and_a_restart(tmp_path: Path) -> None:
    receiver = start_server(tmp_path / "b")
    relay = Relay(urlsplit(receiver.url).port or 0)
    config = {
        "targets": {"lab": {"url": f"http://127.0.0.1:{relay.port}", "token": receiver.token}},
        "sync": {"target": "lab", "task_types": ["base"]},
    }
    sender = start_server(tmp_path / "a", config=config)
    outbox = sender.workspace / ".sync" / "outbox"
    try:
        first = run_task(sender, "demo", x=1, y=2, task_name="while-down")["task_id"]
        assert eventually(lambda: (outbox / first).exists())
        sender.stop()  # the outbox outlives the server
        assert (outbox / first).exists()
        sender = start_server(tmp_path / "a", config=config)
        assert (outbox / first).exists()
        assert first not in receiver.call("list_task_ids")["answer"]
        assert outbox_depth_metric(sender) == 1

        relay.start()  # the target comes back: the retry loop finds it
        assert eventually(lambda: first in receiver.call("list_task_ids")["answer"], 60)
        assert eventually(lambda: not (outbox / first).exists())
        second = run_task(
            sender, "command", command="sh -c 'echo hi > a.txt'", task_name="while-up"
        )["task_id"]
        assert eventually(lambda: second in receiver.call("list_task_ids")["answer"], 60)
        assert sha256(task_dir(receiver, second) / "a.txt") == sha256(
            task_dir(sender, second) / "a.txt"
        )
        status = receiver.call("status", task_id=second)["answer"]
        assert status["synced_from"]["run_id"] == status["run_id"]
        assert eventually(lambda: list(outbox.iterdir()) == [])
        assert outbox_depth_metric(sender) == 0
    finally:
        relay.stop()
        sender.stop()
        receiver.stop()
