"""The fake Kubernetes API server takes a client that hangs up mid-stream as a normal end:
no traceback on stderr (a test run printed a BrokenPipeError that looked like a failure)."""

from __future__ import annotations

import socket
import struct
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from k8s_fake_api import FakeKubernetes  # noqa: E402

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "hangup", "namespace": "default"},
    "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "w", "image": "x"}]}}},
}


def hang_up(fake: FakeKubernetes, path: str, until: bytes) -> None:
    """GET ``path``, read until ``until`` arrives, then close with a reset (SO_LINGER 0)."""
    with socket.create_connection(("127.0.0.1", fake.server.server_address[1]), 5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: fake\r\n\r\n".encode())
        seen = b""
        while until not in seen:
            data = sock.recv(65536)
            assert data, seen
            seen += data
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize("kind", ["log", "watch"])
def test_a_follower_that_hangs_up_leaves_no_traceback(
    kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    fake = FakeKubernetes().start()
    try:
        httpx.post(fake.url + "/apis/batch/v1/namespaces/default/jobs", json=JOB).raise_for_status()
        fake.start_container("hangup")
        fake.write_log("hangup", b"first line\n")
        pod = fake.pod_of("hangup")["metadata"]["name"]
        if kind == "log":
            hang_up(fake, f"/api/v1/namespaces/default/pods/{pod}/log?follow=true", b"first line")
        else:
            path = "/api/v1/namespaces/default/pods?watch=true&resourceVersion=0"
            hang_up(fake, path, b"ADDED")
        for index in range(20):  # the stream goes on writing to the closed connection
            fake.write_log("hangup", b"line %d\n" % index)
            fake.start_container("hangup")  # a pod event for the watch
            time.sleep(0.05)
        answered = httpx.get(fake.url + "/apis/batch/v1/namespaces/default/jobs/hangup")
        assert answered.status_code == 200  # the server goes on
    finally:
        fake.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert "ConnectionResetError" not in err, err
