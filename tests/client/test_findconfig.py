"""runyard.findconfig reads workspace_dir and token the way the settings model does, so the
client (which must not load the model) and the CLI find the same workspace and token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runyard.config import Settings
from runyard.errors import ConfigError
from runyard.findconfig import config_path, plain_settings

NAMES = ("workspace_dir", "token")
CASES = [
    # (runyard.yaml, environment, .env)
    ("", {}, ""),
    ("workspace_dir: from-file\ntoken: file-token\n", {}, ""),
    ("token: file-token\n", {"RUNYARD_TOKEN": "env-token"}, ""),
    ("port: 9000\n", {"RUNYARD_TOKEN": "env-token", "RUNYARD_WORKSPACE_DIR": "/abs/ws"}, ""),
    ("", {"runyard_token": "lower-case"}, "RUNYARD_WORKSPACE_DIR=from-dotenv\n"),
    ("", {"RUNYARD_WORKSPACE_DIR": "env-ws"}, "RUNYARD_WORKSPACE_DIR=dotenv-ws\n"),
    ("# only a comment\n", {}, "RUNYARD_TOKEN=dotenv-token\n"),
]


@pytest.fixture
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in [n for n in os.environ if n.upper().startswith("RUNYARD_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("config", "env", "dotenv"), CASES)
def test_the_same_values_and_origins_as_the_settings_model(
    clean: Path, monkeypatch: pytest.MonkeyPatch, config: str, env: dict[str, str], dotenv: str
) -> None:
    if config:
        (clean / "runyard.yaml").write_text(config)
    if dotenv:
        (clean / ".env").write_text(dotenv)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings, origins = Settings.load_with_origins()
    found = plain_settings(NAMES, config_path(None), os.environ)
    assert found["token"][0] == settings.token
    assert Path(found["workspace_dir"][0] or "") == settings.workspace_dir
    for name in NAMES:
        origin = origins[name]
        assert found[name][1] == ("env" if origin.startswith("env ") else origin), name


def test_a_named_config_that_does_not_exist_is_refused_like_the_model(clean: Path) -> None:
    env = {"RUNYARD_CONFIG": str(clean / "missing.yaml")}
    with pytest.raises(ConfigError, match="does not exist"):
        config_path(None, env)


def test_a_wrong_type_is_refused(clean: Path) -> None:
    (clean / "runyard.yaml").write_text("token: 12\n")
    with pytest.raises(ConfigError, match="token"):
        plain_settings(NAMES, config_path(None), {})
    (clean / "runyard.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        plain_settings(NAMES, config_path(None), {})
