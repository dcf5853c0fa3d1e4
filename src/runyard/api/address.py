"""Where a workspace's server recorded its address and token (``<workspace>/server.json``).

``{"url", "pid", "token", "started_at"}`` — ``token`` is the token in force (configured or
generated at start; ``null`` with ``--no-auth``). The file is created mode 0600 and never
exists with another mode, so only the server's own user reads the token; the CLI and
:meth:`runyard.client.Client.from_workspace` read it (one reader:
:func:`runyard.client.discovery.read_record`) so that user types nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runyard.config import Settings
from runyard.workspace.atomic import write_json_atomic

SERVER_FILE = "server.json"


def server_file(settings: Settings) -> Path:
    return Path(os.path.abspath(settings.workspace_dir)) / SERVER_FILE


def write_server_file(path: Path, record: dict[str, Any]) -> None:
    """Replace ``path`` atomically with a file that is 0600 from its creation on."""
    write_json_atomic(path, record, mode=0o600)
