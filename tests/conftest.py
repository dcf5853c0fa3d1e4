from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from serverproc import ServerProcess, start_server  # noqa: E402


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real server on 127.0.0.1 (random port) with its own workspace under tmp_path."""
    proc = start_server(tmp_path / "srv")
    try:
        yield proc
    finally:
        proc.stop()
