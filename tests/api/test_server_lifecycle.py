"""The server records its address while it serves and removes it when stopped."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runyard.errors import ConfigError
from serverproc import ServerProcess, start_server


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_address_file_lives_as_long_as_the_server(tmp_path: Path, sig: int) -> None:
    srv = start_server(tmp_path / "srv")
    address = srv.workspace / "server.json"
    assert stat.S_IMODE(address.stat().st_mode) == 0o600
    recorded = json.loads(address.read_text())
    assert recorded["url"] == srv.url and recorded["token"] == srv.token
    assert srv.stop(sig) == 0
    assert json.loads(address.read_text()) == {"token": srv.token}  # no address: the token
    assert stat.S_IMODE(address.stat().st_mode) == 0o600


def _loop_library_loaded(pid: int) -> bool:
    return "/uvloop/loop." in Path(f"/proc/{pid}/maps").read_text()


def _runs_a_task(srv: ServerProcess) -> None:
    from runyard.client import Client

    with Client(srv.url, srv.token) as client:
        handle = client.submit("demo", x=2, y=3)
        final = client.wait(handle, timeout=60)
    assert final.state.value == "succeeded" and final.result["result"] == 5


def _without_uvloop(tmp_path: Path) -> dict[str, str]:
    """The environment of a server where ``import uvloop`` fails, as where it is not installed."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "uvloop.py").write_text('raise ImportError("uvloop is not installed here")\n')
    return {"PYTHONPATH": str(shadow)}


def test_the_event_loop_setting_picks_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    from runyard.api.server import event_loop_factory

    assert event_loop_factory("auto") is uvloop.new_event_loop
    assert event_loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop_factory("asyncio") is None
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    assert event_loop_factory("auto") is None
    assert event_loop_factory("asyncio") is None
    with pytest.raises(ConfigError, match="event_loop: uvloop, but uvloop cannot be imported"):
        event_loop_factory("uvloop")


def test_a_server_on_asyncios_loop_serves_tasks(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "srv", config={"event_loop": "asyncio"})
    try:
        _runs_a_task(srv)
    finally:
        srv.stop()


def test_without_uvloop_the_server_runs_on_asyncios_loop(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "srv", env=_without_uvloop(tmp_path))
    try:
        assert not _loop_library_loaded(srv.proc.pid)  # the shadow hid it
        _runs_a_task(srv)
    finally:
        srv.stop()


def test_uvloop_asked_for_where_it_is_missing_stops_the_start(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (tmp_path / "runyard.yaml").write_text("event_loop: uvloop\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "serve", "--port", "0", "--workspace-dir",
         str(workspace), "--log-dir", str(tmp_path / "logs"), "--config",
         str(tmp_path / "runyard.yaml")],
        env={**env, **_without_uvloop(tmp_path)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "event_loop: uvloop, but uvloop cannot be imported" in done.stderr
    assert not (workspace / "server.json").exists()  # nothing was served


def test_a_misspelt_event_loop_is_refused() -> None:
    from runyard.config import Settings

    with pytest.raises(ValueError, match="event_loop"):
        Settings(event_loop="uv")
