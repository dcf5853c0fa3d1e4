"""Where a workspace's server recorded its address and token (``<workspace>/server.json``).

``{"url", "pid", "token", "started_at"}`` — ``token`` is the token in force (configured or
generated at start; ``null`` with ``--no-auth``). The file is created mode 0600 and never
exists with another mode, so only the server's own user reads the token; the CLI and
:meth:`runyard.client.Client.from_workspace` read it so that user types nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runyard.config import Settings
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic

SERVER_FILE = "server.json"


def server_file(settings: Settings) -> Path:
    return Path(os.path.abspath(settings.workspace_dir)) / SERVER_FILE


def read_server_file(settings: Settings) -> dict[str, Any] | None:
    """The recorded address of this workspace's server, if that server is still alive."""
    return read_server_record(Path(settings.workspace_dir))


def read_server_record(workspace: Path) -> dict[str, Any] | None:
    """``server.json`` of ``workspace`` if it is well formed and its server is alive."""
    info = read_json_tolerant(Path(os.path.abspath(workspace)) / SERVER_FILE)
    if not info or not isinstance(info.get("pid"), int) or not isinstance(info.get("url"), str):
        return None
    if not isinstance(info.get("token"), str):
        info["token"] = None
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return info


def write_server_file(path: Path, record: dict[str, Any]) -> None:
    """Replace ``path`` atomically with a file that is 0600 from its creation on."""
    write_json_atomic(path, record, mode=0o600)
