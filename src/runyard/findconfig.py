"""Which config file applies, and the few plain settings a client needs from it, without
the settings model: ``runyard.config`` and ``runyard.client.discovery`` share this.

    config_path(None)                       # --config, else RUNYARD_CONFIG, else ./runyard.yaml
    plain_settings(("workspace_dir", "token"), config_path(None), os.environ)
    # {"workspace_dir": (".runyard", "default"), "token": ("s3cret", "runyard.yaml")}

The precedence is the settings model's (see :class:`runyard.config.Settings`): the config
file, then the environment (``RUNYARD_<NAME>``, any case), then ``./.env``, then the
default. Only string settings are read here; the client needs no more, and must not pay for
pydantic to find its server. Importing this module loads nothing outside the standard
library and ``runyard.errors``: YAML and ``.env`` readers load only when a file is there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from runyard.errors import ConfigError

CONFIG_FILE = "runyard.yaml"
CONFIG_ENV = "RUNYARD_CONFIG"
ENV_PREFIX = "RUNYARD_"
DOTENV_FILE = ".env"
DEFAULTS: dict[str, str | None] = {"workspace_dir": ".runyard", "log_dir": "logs", "token": None}


def config_path(explicit: Path | None, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: ``explicit`` (which must exist), else the one named by
    ``RUNYARD_CONFIG`` (which must exist), else ``./runyard.yaml`` when there is one."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"Config file {explicit} does not exist")
        return explicit
    from_env = (os.environ if env is None else env).get(CONFIG_ENV)
    if from_env:
        return config_path(Path(from_env))
    default = Path(CONFIG_FILE)
    return default if default.is_file() else None


def plain_settings(
    names: Iterable[str], config: Path | None, env: Mapping[str, str]
) -> dict[str, tuple[str | None, str]]:
    """``{name: (value, origin)}`` for string settings ``names`` (keys of ``DEFAULTS``);
    origin is the config file's path, ``env``, ``.env`` or ``default``."""
    layers = [
        (str(config or ""), _file_values(config)),
        ("env", _prefixed(env)),
        (DOTENV_FILE, _prefixed(_dotenv_values(Path(DOTENV_FILE)))),
    ]
    found: dict[str, tuple[str | None, str]] = {}
    for name in names:
        found[name] = (DEFAULTS[name], "default")
        for origin, values in layers:
            if name in values:
                found[name] = (_plain(name, values[name], origin), origin)
                break
    return found


def _file_values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    import yaml  # only when a config file decides: finding a server costs no YAML parser

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must hold a mapping of settings")
    return data


def _dotenv_values(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {key: value for key, value in dotenv_values(path).items() if value is not None}


def _prefixed(values: Mapping[str, Any]) -> dict[str, Any]:
    """Settings named by ``RUNYARD_<NAME>`` keys, matched in any case as the model does."""
    return {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in values.items()
        if key.upper().startswith(ENV_PREFIX)
    }


def _plain(name: str, value: Any, origin: str) -> str | None:
    if value is None and DEFAULTS[name] is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"Invalid settings: {name} from {origin} must be a string")
    return value
