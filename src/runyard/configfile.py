"""The config file (``runyard.yaml``): read through pydantic-settings' YAML source, and
checked key by key against the settings model before anything is built from it.

    values = read_config_file(Settings, Path("runyard.yaml"))   # ConfigError if wrong

A typo is an error that names the closest valid key, at any depth the model describes
(``kubernetes:``, ``retention:``, each entry of ``targets:`` …)::

    unknown setting 'max_concurent_tasks' in runyard.yaml; did you mean 'max_concurrent_tasks'?

A silently ignored key is worse than a refused one: the server would run with a value the
user believes they changed.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_settings import BaseSettings, YamlConfigSettingsSource

from runyard.errors import ConfigError
from runyard.suggest import closest


def read_config_file(settings_cls: type[BaseSettings], path: Path) -> dict[str, Any]:
    """The settings ``path`` holds, once every key is known to be one."""
    try:
        source = YamlConfigSettingsSource(settings_cls, yaml_file=path)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc}") from exc
    except (ValueError, TypeError) as exc:  # a list or a scalar where a mapping belongs
        raise ConfigError(f"Config file {path} must hold a mapping of settings") from exc
    check_keys(settings_cls, source.yaml_data, path.name)
    return dict(source.yaml_data)


def check_keys(model: type[BaseModel], data: Any, file_name: str, prefix: str = "") -> None:
    """Refuse the first key of ``data`` (and of its nested sections) ``model`` does not have."""
    if not isinstance(data, dict):
        return  # a wrong type is the model's to report, with its own message
    fields = model.model_fields
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(unknown_key_message(f"{prefix}{key}", fields, prefix, file_name))
        annotation = fields[key].annotation
        nested = _model_of(annotation)
        if nested is not None:
            check_keys(nested, value, file_name, f"{prefix}{key}.")
            continue
        entry = _dict_value_model_of(annotation)
        if entry is not None and isinstance(value, dict):
            for name, item in value.items():
                check_keys(entry, item, file_name, f"{prefix}{key}.{name}.")


def unknown_key_message(key: str, fields: Any, prefix: str, file_name: str) -> str:
    leaf = key[len(prefix) :]
    close = closest(str(leaf), fields)
    hint = f"; did you mean '{prefix}{close}'?" if close else ""
    return f"unknown setting '{key}' in {file_name}{hint}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class of ``Model`` or ``Model | None``, else None."""
    for candidate in _union_members(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _dict_value_model_of(annotation: Any) -> type[BaseModel] | None:
    """The value model of ``dict[str, Model]``, else None."""
    for candidate in _union_members(annotation):
        if typing.get_origin(candidate) is dict:
            args = typing.get_args(candidate)
            if len(args) == 2:
                return _model_of(args[1])
    return None


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)
