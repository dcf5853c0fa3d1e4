"""A key of runyard.yaml that is not a setting is refused, naming the closest valid key."""

from __future__ import annotations

from pathlib import Path

import pytest

from runyard.config import Settings
from runyard.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("RUNYARD_WORKSPACE_DIR", "RUNYARD_LOG_DIR", "RUNYARD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_concurent_tasks: 2\n",
         "unknown setting 'max_concurent_tasks' in runyard.yaml; "
         "did you mean 'max_concurrent_tasks'?"),
        ("port: 1\nenv_alowlist: [PATH]\n",
         "unknown setting 'env_alowlist' in runyard.yaml; did you mean 'env_allowlist'?"),
        ("kubernetes:\n  image: a:1\n  namespce: x\n",
         "unknown setting 'kubernetes.namespce' in runyard.yaml; "
         "did you mean 'kubernetes.namespace'?"),
        ("retention:\n  max_age_day: 3\n",
         "unknown setting 'retention.max_age_day' in runyard.yaml; "
         "did you mean 'retention.max_age_days'?"),
        ("targets:\n  lab: {url: 'http://x', tokn: y}\n",
         "unknown setting 'targets.lab.tokn' in runyard.yaml; did you mean 'targets.lab.token'?"),
        ("task_limits: {memory: 100}\n",
         "unknown setting 'task_limits.memory' in runyard.yaml; "
         "did you mean 'task_limits.memory_mb'?"),
        ("zzz_qqq: 1\n", "unknown setting 'zzz_qqq' in runyard.yaml"),
    ],
)  # fmt: skip
def test_an_unknown_key_names_the_closest_setting(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "runyard.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        Settings.load()
    assert str(caught.value) == message


def test_valid_nested_sections_and_task_env_load(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text(
        "task_env: strict\nkubernetes: {image: 'a:1'}\nretention: {max_age_days: 2}\n"
        "targets: {lab: {url: 'http://x', token: t}}\n"
    )
    settings = Settings.load()
    assert settings.task_env == "strict" and settings.kubernetes is not None
    assert settings.retention.max_age_days == 2 and settings.targets["lab"].token == "t"
    (tmp_path / "runyard.yaml").write_text("task_env: loose\n")
    with pytest.raises(ConfigError, match="task_env"):
        Settings.load()


def test_origins_name_each_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("RUNYARD_CANCEL_GRACE_SECONDS=2\n")
    (tmp_path / "runyard.yaml").write_text("max_concurrent_tasks: 3\n")
    monkeypatch.setenv("RUNYARD_PORT", "4321")
    monkeypatch.setenv("RUNYARD_KUBERNETES__IMAGE", "a:1")
    settings, origins = Settings.load_with_origins(cli={"host": "0.0.0.0", "log_dir": None})
    assert (settings.host, settings.port, settings.max_concurrent_tasks) == ("0.0.0.0", 4321, 3)
    assert origins["host"] == "command line" and origins["port"] == "env RUNYARD_PORT"
    assert origins["max_concurrent_tasks"] == "runyard.yaml"
    assert origins["kubernetes"] == "env RUNYARD_KUBERNETES__IMAGE"
    assert origins["cancel_grace_seconds"] == ".env" and origins["log_dir"] == "default"


def test_the_file_outranks_the_environment_and_nested_values_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "runyard.yaml").write_text("port: 1111\nkubernetes: {image: 'a:1'}\n")
    monkeypatch.setenv("RUNYARD_PORT", "2222")
    monkeypatch.setenv("RUNYARD_KUBERNETES__NAMESPACE", "agents")
    settings = Settings.load()
    assert settings.port == 1111 and settings.kubernetes is not None
    assert (settings.kubernetes.image, settings.kubernetes.namespace) == ("a:1", "agents")
    assert Settings.load(cli={"port": 3333}).port == 3333
