"""``runyard gc`` with no server: the same collection, on the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gc_helpers import finished, task_dir

from runyard.config import Settings
from runyard.errors import ConfigError
from serverproc import start_server


def _gc_files(root: Path, *flags: str) -> dict[str, object]:
    argv = [
        sys.executable, "-m", "runyard", "gc", "--json", *flags,
        "--workspace-dir", str(root / "ws"), "--log-dir", str(root / "logs"),
        "--config", str(root / "runyard.yaml"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_gc_without_a_server_acts_on_the_files(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    server = start_server(root, config={"retention": {"keep_last_per_task": 1}})
    try:
        up = finished(server, "up")["task_id"]
        lone = finished(server, "lone")["task_id"]
        down = finished(server, "down", source=up)["task_id"]
    finally:
        server.stop()
    preview = _gc_files(root, "--dry-run")  # the recorded server is gone: the files answer
    assert preview["tasks"] == [lone] and preview["kept_upstreams"] == [up]
    done = _gc_files(root)
    assert done["tasks"] == [lone] and done["bytes"] == preview["bytes"]
    assert not task_dir(server, lone).exists()
    assert task_dir(server, up).is_dir() and task_dir(server, down).is_dir()


def test_retention_settings_refuse_unknown_fields_and_states(tmp_path: Path) -> None:
    config = tmp_path / "runyard.yaml"
    config.write_text("retention: {keep_last_per_task: 3, states: [succeeded]}\n")
    settings = Settings.load(config_file=config)
    assert settings.retention.keep_last_per_task == 3 and settings.retention.configured
    assert not Settings.load(cli={}).retention.configured
    for bad in ("{keep_last: 3}", "{states: [running]}", "{max_age_days: 0}"):
        config.write_text(f"retention: {bad}\n")
        with pytest.raises(ConfigError):
            Settings.load(config_file=config)
