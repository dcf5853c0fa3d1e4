"""Settings precedence: CLI > config file > environment (and .env) > defaults."""

from pathlib import Path

import pytest

from runyard.config import Settings
from runyard.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("RUNYARD_WORKSPACE_DIR", "RUNYARD_LOG_DIR", "RUNYARD_CONFIG", "RUNYARD_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    settings = Settings.load()
    assert settings.workspace_dir == Path(".runyard") and settings.log_dir == Path("logs")
    assert settings.host == "127.0.0.1" and settings.port == 8765 and settings.token is None


def test_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("RUNYARD_LOG_DIR=from-dotenv\nRUNYARD_PORT=1111\n")
    assert Settings.load().log_dir == Path("from-dotenv")
    monkeypatch.setenv("RUNYARD_LOG_DIR", "from-env")
    assert Settings.load().log_dir == Path("from-env")
    (tmp_path / "runyard.yaml").write_text("log_dir: from-file\nport: 2222\n")
    settings = Settings.load()
    assert settings.log_dir == Path("from-file") and settings.port == 2222
    assert Settings.load(cli={"log_dir": Path("from-cli"), "port": None}).log_dir == Path("from-cli")


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text("port: not-a-port\n")
    with pytest.raises(ConfigError, match="port"):
        Settings.load()
    (tmp_path / "runyard.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        Settings.load()
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.load(config_file=tmp_path / "missing.yaml")
