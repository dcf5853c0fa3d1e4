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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.client.discovery import CONFIG_FILE, WORKSPACE_FOLDER, find_upwards
from runyard.errors import WorkspaceNotFound

if TYPE_CHECKING:
    from runyard.config import Settings

NO_WORKSPACE = (
    "no runyard workspace here or in any parent folder; run `runyard serve` (or "
    "`runyard run TASK`) in the folder that should hold it, or pass --workspace-dir"
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
        return _rebased(found_settings, found_origins, found.folder)
    if found.workspace == found.folder / WORKSPACE_FOLDER:
        if found.folder == here:
            return settings  # the defaults already point here
        return _rebased(settings, origins, found.folder)
    # the folder is a workspace itself: its logs are looked for beside it, as for .runyard
    moved = settings.model_copy(update={"workspace_dir": found.folder})
    return _rebased(moved, {**origins, "workspace_dir": "found"}, found.folder.parent)


def _rebased(settings: Settings, origins: dict[str, str], folder: Path) -> Settings:
    """Relative workspace and log folders taken from ``folder`` instead of the current one,
    except those given on the command line or in the environment (they mean "from here")."""
    update = {}
    for name in ("workspace_dir", "log_dir"):
        value = Path(getattr(settings, name))
        origin = origins.get(name, "default")
        if not value.is_absolute() and (origin == "default" or origin.endswith(CONFIG_FILE)):
            update[name] = folder / value
    return settings.model_copy(update=update)


def require_workspace(settings: Settings) -> Path:
    """The workspace folder, which must exist: reading commands never make an empty one."""
    path = Path(settings.workspace_dir)
    if path.is_dir():
        return path
    if path == Path(WORKSPACE_FOLDER):
        raise WorkspaceNotFound(NO_WORKSPACE)
    raise WorkspaceNotFound(f"no runyard workspace at {path}; check --workspace-dir")
