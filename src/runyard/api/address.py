"""Where a workspace's server recorded its address (``<workspace>/server.json``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runyard.config import Settings
from runyard.workspace.atomic import read_json_tolerant

SERVER_FILE = "server.json"


def server_file(settings: Settings) -> Path:
    return Path(os.path.abspath(settings.workspace_dir)) / SERVER_FILE


def read_server_file(settings: Settings) -> dict[str, Any] | None:
    """The recorded address of this workspace's server, if that server is still alive."""
    info = read_json_tolerant(server_file(settings))
    if not info or not isinstance(info.get("pid"), int) or not isinstance(info.get("url"), str):
        return None
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return info
