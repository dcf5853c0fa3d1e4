"""Which workspace a command works on, found the way git finds its repository.

The rule is the one the Python client follows, in :mod:`runyard.client.discovery` (a light
module: it loads no HTTP client and no models): a workspace named by ``--workspace-dir``,
``RUNYARD_WORKSPACE_DIR`` or a config file wins; otherwise the nearest folder at or above
the current one that is a workspace (holds ``server.json``), holds a ``runyard.yaml`` or
holds a ``.runyard`` folder decides. A workspace found upwards keeps its logs in ``logs``
beside it.

With nothing found the default ``./.runyard`` stays, and commands that only read a
workspace refuse it when it does not exist (:func:`require_workspace`) instead of showing
an empty one.

Commands that only find the workspace and its server (``ls``, ``status``...) need three
settings; :func:`place_found_upwards` gives them as a :class:`Place`, read without the
settings model, unless a config file, a ``.env`` file or another ``RUNYARD_`` variable is
there to be read and checked: then it gives the full settings, as :func:`load_settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.client.discovery import CONFIG_FILE, WORKSPACE_FOLDER, Found, find_upwards
from runyard.errors import WorkspaceNotFound
from runyard.findconfig import DOTENV_FILE, config_path, plain_settings

if TYPE_CHECKING:
    from runyard.config import Settings

NO_WORKSPACE = (
    "no runyard workspace here or in any parent folder; run `runyard serve` (or "
    "`runyard run TASK`) in the folder that should hold it, or pass --workspace-dir"
)
FOLDERS = ("workspace_dir", "log_dir")
# the variables a Place reads; any other RUNYARD_ variable is a setting to read and check
PLACE_ENV = frozenset({"RUNYARD_URL", "RUNYARD_TOKEN", "RUNYARD_WORKSPACE_DIR", "RUNYARD_LOG_DIR"})


@dataclass(frozen=True)
class Place:
    """The settings that find a workspace and its server, when nothing else is set."""

    workspace_dir: Path
    log_dir: Path
    token: str | None


def place_found_upwards(
    cli: dict[str, Any], config: Path | None, start: Path | None = None
) -> Place | Settings:
    """A :class:`Place` found as :func:`settings_found_upwards` finds the settings, or
    those settings when a config file, ``.env`` or another setting asks for the model."""
    place = _light_place(cli, config, start)
    return place if place is not None else settings_found_upwards(cli, config, start)


def full_settings(place: Place | Settings) -> Settings:
    """The settings model of ``place``: a :class:`Place` was found with nothing else set,
    so its folders and the environment make the same settings."""
    if not isinstance(place, Place):
        return place
    from runyard.config import Settings

    return Settings.load(cli={name: getattr(place, name) for name in FOLDERS})


def _light_place(cli: dict[str, Any], config: Path | None, start: Path | None) -> Place | None:
    given = {name: value for name, value in cli.items() if value is not None}
    if config is not None or set(given) - set(FOLDERS) or _asks_for_settings(os.environ):
        return None
    if config_path(None) is not None or Path(DOTENV_FILE).exists():
        return None
    plain = plain_settings(("token", *FOLDERS), None, os.environ)
    origins = {name: "command line" if name in given else plain[name][1] for name in FOLDERS}
    folders = {name: Path(given.get(name) or plain[name][0] or "") for name in FOLDERS}
    if origins["workspace_dir"] == "default":
        here = Path(os.path.abspath(start if start is not None else os.getcwd()))
        found = find_upwards(here)
        if found is not None and found.config is not None:
            return None  # a config file decides: read and checked by the model
        if found is not None:
            folders.update(_found_folders(folders, origins, found, here))
    return Place(folders["workspace_dir"], folders["log_dir"], plain["token"][0])


def _asks_for_settings(env: Mapping[str, str]) -> bool:
    """Whether ``env`` sets more than a :class:`Place` reads (or a folder to nothing)."""
    return any(
        key not in PLACE_ENV or (not value and key.endswith("_DIR"))
        for key, value in env.items()
        if key.upper().startswith("RUNYARD_")
    )


def settings_found_upwards(
    cli: dict[str, Any], config: Path | None, start: Path | None = None
) -> Settings:
    """Settings from ``cli`` (options given), ``config`` and the environment, with the
    workspace looked up from ``start`` (default: the current folder) when none is named."""
    from runyard.config import Settings

    settings, origins = Settings.load_with_origins(cli=cli, config_file=config)
    if origins.get("workspace_dir") != "default":
        return settings
    config_named = config is not None or bool(os.environ.get("RUNYARD_CONFIG"))
    here = Path(os.path.abspath(start if start is not None else os.getcwd()))
    found = find_upwards(here, config_named=config_named)
    if found is None:
        return settings
    if found.config is not None:
        if found.folder == here:
            return settings  # the defaults already read ./runyard.yaml
        found_settings, found_origins = Settings.load_with_origins(
            cli=cli, config_file=found.config
        )
        found_folders = {name: Path(getattr(found_settings, name)) for name in FOLDERS}
        return found_settings.model_copy(
            update=_rebased(found_folders, found_origins, found.folder)
        )
    folders = {name: Path(getattr(settings, name)) for name in FOLDERS}
    return settings.model_copy(update=_found_folders(folders, origins, found, here))


def _found_folders(
    folders: dict[str, Path], origins: Mapping[str, str], found: Found, here: Path
) -> dict[str, Path]:
    """The folders that change for a workspace ``found`` upwards (not by a config file)."""
    if found.workspace == found.folder / WORKSPACE_FOLDER:
        if found.folder == here:
            return {}  # the defaults already point here
        return _rebased(folders, origins, found.folder)
    # the folder is a workspace itself: its logs are looked for beside it, as for .runyard
    moved = {**folders, "workspace_dir": found.folder}
    return {"workspace_dir": found.folder, **_rebased(moved, origins, found.folder.parent)}


def _rebased(
    folders: Mapping[str, Path], origins: Mapping[str, str], folder: Path
) -> dict[str, Path]:
    """Relative workspace and log folders taken from ``folder`` instead of the current one,
    except those given on the command line or in the environment (they mean "from here")."""
    update = {}
    for name in FOLDERS:
        value = folders[name]
        origin = origins.get(name, "default")
        if not value.is_absolute() and (origin == "default" or origin.endswith(CONFIG_FILE)):
            update[name] = folder / value
    return update


def require_workspace(settings: Place | Settings) -> Path:
    """The workspace folder, which must exist: reading commands never make an empty one."""
    path = Path(settings.workspace_dir)
    if path.is_dir():
        return path
    if path == Path(WORKSPACE_FOLDER):
        raise WorkspaceNotFound(NO_WORKSPACE)
    raise WorkspaceNotFound(f"no runyard workspace at {path}; check --workspace-dir")
