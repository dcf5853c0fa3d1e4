"""Where a workspace's server recorded its address and token (``<workspace>/server.json``).

``{"url", "pid", "token", "started_at"}`` while the server runs — ``token`` is the token in
force (configured, kept or generated at start; ``null`` with ``--no-auth``). A stopped
server leaves ``{"token"}`` alone: no address (so no client takes it for a running server),
and the token the next start reuses (:func:`kept_token`) unless one is configured or
``serve --rotate-token`` makes a new one. The file is created mode 0600 and never exists
with another mode, so only the server's own user reads the token; the CLI and
:meth:`runyard.client.Client.from_workspace` read it (one reader:
:func:`runyard.client.discovery.read_record`) so that user types nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runyard.config import Settings
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic

SERVER_FILE = "server.json"
MAX_TOKEN_LENGTH = 512


def server_file(settings: Settings) -> Path:
    return Path(os.path.abspath(settings.workspace_dir)) / SERVER_FILE


def write_server_file(path: Path, record: dict[str, Any]) -> None:
    """Replace ``path`` atomically with a file that is 0600 from its creation on."""
    write_json_atomic(path, record, mode=0o600)


def kept_token(path: Path) -> str | None:
    """The token ``path`` holds, if it is one a header can carry; else None (a new one is
    made: a damaged or hand-edited file never turns into an odd token)."""
    record = read_json_tolerant(path) or {}
    token = record.get("token")
    if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_LENGTH:
        return None
    return token if all("!" <= ch <= "~" for ch in token) else None


def leave_token(path: Path, token: str | None) -> None:
    """What a stopping server leaves: ``{"token"}`` for the next start, or no file."""
    if token:
        write_server_file(path, {"token": token})
    else:
        path.unlink(missing_ok=True)
