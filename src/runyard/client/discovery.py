"""Finding the workspace, and the server to talk to with its token, the way the
``runyard`` command does: this module holds the one rule both follow.

The workspace (:func:`find_upwards`): a workspace named by ``RUNYARD_WORKSPACE_DIR`` (or
``--workspace-dir``) or by a named config file wins. Otherwise the current folder and then
each parent is looked at, nearest first, as git finds its repository; in each folder:

1. a ``server.json`` of a runyard server there: the folder is a workspace itself;
2. a ``runyard.yaml`` there (unless ``--config``/``RUNYARD_CONFIG`` named one): the config,
   whose relative paths are taken from its own folder;
3. a ``.runyard`` folder there: that is the workspace.

The server (:func:`find_server`), in order:

1. ``RUNYARD_URL`` (and ``RUNYARD_TOKEN``) in the environment;
2. the ``server.json`` of the workspace found as above, while its server is alive; the
   config's ``token`` comes along when a config file decided the workspace.

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
from runyard.findconfig import CONFIG_ENV, CONFIG_FILE, config_path, plain_settings

__all__ = [
    "CONFIG_FILE",
    "SERVER_FILE",
    "WORKSPACE_FOLDER",
    "Found",
    "ServerLocation",
    "find_server",
    "find_upwards",
    "read_record",
]

SERVER_FILE = "server.json"
WORKSPACE_FOLDER = ".runyard"


@dataclass(frozen=True)
class Found:
    """Where the upward walk stopped: the ``folder`` looked at, and either its
    ``workspace`` (the folder itself or its ``.runyard``) or its ``config`` file, which
    names the workspace relative to ``folder``."""

    folder: Path
    workspace: Path | None
    config: Path | None


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
    workspace, configured = _workspace(folder, env)
    record = read_record(workspace) if workspace is not None else None
    if url is None and record is None:
        raise ServerNotFound(_not_found(workspace))
    address = url or record["url"]  # type: ignore[index]
    recorded = None
    if record is not None and _same(record["url"], address):
        recorded = record["token"]
    return ServerLocation(address.rstrip("/"), token or configured or recorded, workspace)


def find_upwards(start: str | os.PathLike[str], *, config_named: bool = False) -> Found | None:
    """The nearest workspace or config file at or above ``start`` (see the module's rule);
    ``config_named``: a config file was named, so a ``runyard.yaml`` found is not one."""
    here = Path(os.path.abspath(start))
    for folder in (here, *here.parents):
        if _load(folder / SERVER_FILE) is not None:  # another tool's server.json is not
            return Found(folder, folder, None)
        if not config_named and (folder / CONFIG_FILE).is_file():
            return Found(folder, None, folder / CONFIG_FILE)
        if (folder / WORKSPACE_FOLDER).is_dir():
            return Found(folder, folder / WORKSPACE_FOLDER, None)
    return None


def _workspace(folder: Path, env: Mapping[str, str]) -> tuple[Path | None, str | None]:
    """(workspace, configured token) by the module's rule. The settings machinery loads
    only when a config or the environment decides: ``import runyard.client`` stays light."""
    if env.get("RUNYARD_WORKSPACE_DIR") or env.get("RUNYARD_CONFIG"):
        return _configured(folder, None, env)
    found = find_upwards(folder)
    if found is None:
        return None, None
    if found.config is None:
        return found.workspace, None
    return _configured(found.folder, found.config, env)


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


def _configured(
    folder: Path, config: Path | None, env: Mapping[str, str]
) -> tuple[Path | None, str | None]:
    """(workspace_dir, token) of the settings from ``config`` (else the named or local
    one); relative folders count from ``folder``. A named config that leaves the workspace
    at its default lets the walk find it, as for the command. Only the two settings the
    client needs are read, with the settings model's precedence (:mod:`runyard.findconfig`),
    so finding a server loads no settings model."""
    explicit = env.get(CONFIG_ENV)
    if config is None and explicit:
        config = Path(explicit)
    chosen = config_path(config if config is not None and config.is_file() else None, env)
    found_settings = plain_settings(("workspace_dir", "token"), chosen, env)
    (workspace_dir, origin), (token, _) = found_settings["workspace_dir"], found_settings["token"]
    if origin == "default" and explicit:
        found = find_upwards(folder, config_named=True)
        if found is not None and found.workspace is not None:
            return found.workspace, token
    workspace = Path(workspace_dir or "")
    return (workspace if workspace.is_absolute() else folder / workspace), token


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
