"""Finding the server to talk to, and its token, the way the ``runyard`` command does.

:func:`find_server` looks, in order, at:

1. ``RUNYARD_URL`` (and ``RUNYARD_TOKEN``) in the environment;
2. the workspace found by walking up from the current directory, as git finds its
   repository: the first folder that is a workspace (holds ``server.json``) or holds a
   ``.runyard`` workspace. Its ``server.json`` gives the address and token of its server
   while that server is alive;
3. the config (``--config``/``RUNYARD_CONFIG``/``./runyard.yaml``, ``RUNYARD_*``): its
   ``workspace_dir`` and ``token``.

A recorded token is only ever sent to the server that recorded it: with ``RUNYARD_URL``
naming another address it is not used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.errors import ServerNotFound

__all__ = ["SERVER_FILE", "WORKSPACE_FOLDER", "ServerLocation", "find_server", "read_record"]

SERVER_FILE = "server.json"
WORKSPACE_FOLDER = ".runyard"


@dataclass(frozen=True)
class ServerLocation:
    """Where the server is: its ``url``, the ``token`` to send (``None``: none), and the
    ``workspace`` folder it was found through (``None`` when it came from ``RUNYARD_URL``
    alone)."""

    url: str
    token: str | None
    workspace: Path | None


def find_server(
    start: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> ServerLocation:
    """The server and token to use from ``start`` (default: the current directory).

    Raises :class:`~runyard.errors.ServerNotFound` with one sentence saying what to do
    when there is no server to talk to.
    """
    env = os.environ if env is None else env
    url = env.get("RUNYARD_URL") or None
    token = env.get("RUNYARD_TOKEN") or None
    folder = Path(os.path.abspath(start if start is not None else os.getcwd()))
    workspace = find_workspace(folder)
    configured: str | None = None
    if workspace is None:
        workspace, configured = _configured(folder, env)
    record = read_record(workspace) if workspace is not None else None
    if url is None and record is None:
        raise ServerNotFound(_not_found(workspace))
    address = url or record["url"]  # type: ignore[index]
    recorded = None
    if record is not None and _same(record["url"], address):
        recorded = record["token"]
    return ServerLocation(address.rstrip("/"), token or configured or recorded, workspace)


def find_workspace(folder: Path) -> Path | None:
    """The nearest workspace at or above ``folder``: a folder holding ``server.json``, or
    the ``.runyard`` folder of the nearest folder that has one."""
    for candidate in (folder, *folder.parents):
        if _load(candidate / SERVER_FILE) is not None:  # another tool's server.json is not
            return candidate
        if (candidate / WORKSPACE_FOLDER).is_dir():
            return candidate / WORKSPACE_FOLDER
    return None


def read_record(workspace: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``<workspace>/server.json`` if well formed and its server's process is alive.

    ``token`` is ``None`` when the server runs without auth.
    """
    info = _load(Path(os.path.abspath(workspace)) / SERVER_FILE)
    if info is None:
        return None
    if not isinstance(info.get("token"), str):
        info["token"] = None
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return None  # a record its server left behind when it died
    except PermissionError:
        pass  # alive, owned by another user
    return info


def _load(path: Path) -> dict[str, Any] | None:
    """A well-formed server record (``url`` and ``pid``) at ``path``, alive or not."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    if not isinstance(info.get("pid"), int) or not isinstance(info.get("url"), str):
        return None
    return info


def _configured(folder: Path, env: Mapping[str, str]) -> tuple[Path | None, str | None]:
    """(workspace_dir, token) of the config, read only when no workspace was found: the
    settings machinery is not loaded by ``import runyard.client``."""
    from runyard.config import Settings

    explicit = env.get("RUNYARD_CONFIG")
    config_file = Path(explicit) if explicit else folder / "runyard.yaml"
    settings = Settings.load(config_file=config_file if config_file.is_file() else None)
    workspace = Path(settings.workspace_dir)
    return (workspace if workspace.is_absolute() else folder / workspace), settings.token


def _same(left: str, right: str) -> bool:
    return left.rstrip("/") == right.rstrip("/")


def _not_found(workspace: Path | None) -> str:
    if workspace is not None and workspace.is_dir():
        return (
            f"No runyard server is running for the workspace {workspace}: start one with "
            "`runyard serve`, or set RUNYARD_URL."
        )
    return (
        "No runyard server found: set RUNYARD_URL (and RUNYARD_TOKEN), or run from a folder "
        "whose workspace has a running server (`runyard serve`)."
    )
