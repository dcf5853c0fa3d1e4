"""The server records its address while it serves and removes it when stopped."""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import pytest

from serverproc import start_server


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_address_file_lives_as_long_as_the_server(tmp_path: Path, sig: int) -> None:
    srv = start_server(tmp_path / "srv")
    address = srv.workspace / "server.json"
    assert stat.S_IMODE(address.stat().st_mode) == 0o600
    recorded = json.loads(address.read_text())
    assert recorded["url"] == srv.url and recorded["token"] == srv.token
    assert srv.stop(sig) == 0
    assert not address.exists()
