"""Which workspace a command works on, found the way git finds its repository.

A workspace named by ``--workspace-dir``, ``RUNYARD_WORKSPACE_DIR`` or a config file wins.
Otherwise the current folder and then each parent is looked at, nearest first:

* a ``runyard.yaml`` there is the config (unless ``--config``/``RUNYARD_CONFIG`` named
  one); relative paths in it are taken from its own folder;
* a ``.runyard`` folder there is the workspace (its logs default to ``logs`` beside it).

With nothing found the default ``./.runyard`` stays, and commands that only read a
workspace refuse it when it does not exist (:func:`require_workspace`) instead of showing
an empty one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.errors import WorkspaceNotFound

if TYPE_CHECKING:
    from runyard.config import Settings

WORKSPACE_FOLDER = ".runyard"
CONFIG_FILE = "runyard.yaml"
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
    for folder in (here, *here.parents):
        has_config = (folder / CONFIG_FILE).is_file() and not config_named
        if folder == here and (has_config or (folder / WORKSPACE_FOLDER).is_dir()):
            return settings  # the defaults already point here
        if has_config:
            found, found_origins = Settings.load_with_origins(
                cli=cli, config_file=folder / CONFIG_FILE
            )
            return _rebased(found, found_origins, folder)
        if (folder / WORKSPACE_FOLDER).is_dir():
            return _rebased(settings, origins, folder)
    return settings


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
