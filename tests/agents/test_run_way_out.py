"""What an agent run in its bubblewrap sandbox can reach, tried from inside a real run of a
real server: no network when ``agent_network`` is off (a TCP connection to a listener on
the host's 127.0.0.1 fails, only ``lo`` is there), and none of the server's environment."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import PACKAGES, needs_bwrap
from api_helpers import api, create_run, new_session, wait_run

from serverproc import start_server

pytestmark = [pytest.mark.sandbox, needs_bwrap]

SERVER_ENV = {"RUNYARD_TEST_LEAK": "runyard-leak-5b1f0c", "LEAKY_SECRET": "leaky-secret-93ad7e"}


@pytest.fixture(scope="module")
def way_out(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One run of ``net_probe`` (network off, the default), with what it found and whether
    the host's listener was reached."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    root: Path = tmp_path_factory.mktemp("way-out")
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "bwrap"}
    server = start_server(root, config=config, env=SERVER_ENV)
    try:
        with api(server, timeout=120) as client:
            session = new_session(client)
            created = create_run(client, session, f"connect {port}", package="net_probe")
            run = wait_run(client, created["id"], timeout=90)
            found = client.get(f"/runs/{run['id']}/files/net.json")
        reached = bool(select.select([listener], [], [], 0)[0])  # a connection is waiting
        yield {"run": run, "found": found.json() if found.status_code == 200 else {},
               "reached": reached}  # fmt: skip
    finally:
        server.stop()
        listener.close()


def test_a_run_without_network_reaches_no_host_port(way_out: dict[str, Any]) -> None:
    run, found = way_out["run"], way_out["found"]
    assert run["state"] == "succeeded" and run["isolation"] == "bwrap", run
    assert found["connect"].startswith("failed"), found["connect"]
    assert not way_out["reached"], "the host's listener got a connection from the run"
    assert found["interfaces"] == ["lo"], found["interfaces"]


def test_a_run_sees_none_of_the_servers_environment(way_out: dict[str, Any]) -> None:
    env = way_out["found"]["env"]
    assert env["RUNYARD_ISOLATION"] == "bwrap"  # the probe ran, and inside the sandbox
    for name, value in SERVER_ENV.items():
        assert name not in env, name
        assert value not in json.dumps(env), value
