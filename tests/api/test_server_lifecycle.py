"""The server records its address while it serves and removes it when stopped."""

from __future__ import annotations

import json
import signal
import stat
import sys
from pathlib import Path

import pytest

from serverproc import ServerProcess, start_server


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_address_file_lives_as_long_as_the_server(tmp_path: Path, sig: int) -> None:
    srv = start_server(tmp_path / "srv")
    address = srv.workspace / "server.json"
    assert stat.S_IMODE(address.stat().st_mode) == 0o600
    recorded = json.loads(address.read_text())
    assert recorded["url"] == srv.url and recorded["token"] == srv.token
    assert srv.stop(sig) == 0
    assert not address.exists()


def _loop_library_loaded(pid: int) -> bool:
    return "/uvloop/loop." in Path(f"/proc/{pid}/maps").read_text()


def _runs_a_task(srv: ServerProcess) -> None:
    from runyard.client import Client

    with Client(srv.url, srv.token) as client:
        handle = client.submit("demo", x=2, y=3)
        final = client.wait(handle, timeout=60)
    assert final.state.value == "succeeded" and final.result["result"] == 5


def test_the_server_takes_uvloops_loop_where_it_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvloop

    from runyard.api.server import event_loop_factory

    assert event_loop_factory() is uvloop.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    assert event_loop_factory() is None


def test_without_uvloop_the_server_runs_on_asyncios_loop(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "uvloop.py").write_text('raise ImportError("uvloop is not installed here")\n')
    srv = start_server(tmp_path / "srv", env={"PYTHONPATH": str(shadow)})
    try:
        assert not _loop_library_loaded(srv.proc.pid)  # the shadow hid it
        _runs_a_task(srv)
    finally:
        srv.stop()
