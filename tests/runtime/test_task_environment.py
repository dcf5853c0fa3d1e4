"""What of the server's environment reaches a task's worker (a real worker process)."""

from __future__ import annotations

import pytest
from runtime_helpers import make_settings
from test_worker import run_to_end

from runyard.agents.context import RunView
from runyard.runtime.agentlaunch import run_env
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

SERVER_TOKEN = "server-token-6f1d2c"
TARGET_TOKEN = "target-token-93ab0e"


@pytest.fixture
def server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server environment as a user's shell would give it, runyard's secrets included."""
    for name, value in {
        "HF_TOKEN": "hf_user_secret",
        "CUDA_VISIBLE_DEVICES": "1",
        "AWS_PROFILE": "research",
        "RUNYARD_TOKEN": "env-token-55c1",
        "RUNYARD_TARGETS": '{"other": {"url": "http://x", "token": "in-env"}}',
        "ANOTHER_NAME_FOR_IT": SERVER_TOKEN,  # a copy of the token under any name
        "TARGET_COPY": TARGET_TOKEN,
        "AUTH": f"Bearer {SERVER_TOKEN}",  # the token inside a value, not the whole value
        "TARGET_URL": f"http://127.0.0.1:9/?token={TARGET_TOKEN}&x=1",
        "PWD": "/where/the/server/started",
    }.items():
        monkeypatch.setenv(name, value)


def holds_a_token(env: dict[str, str]) -> list[str]:
    """The variables of ``env`` with runyard's server or target token anywhere in them."""
    return [k for k, v in env.items() if SERVER_TOKEN in v or TARGET_TOKEN in v]


def secure_settings(tmp_path, **overrides):
    return make_settings(
        tmp_path, token=SERVER_TOKEN,
        targets={"other": {"url": "http://127.0.0.1:9", "token": TARGET_TOKEN}}, **overrides,
    )  # fmt: skip


def test_a_task_inherits_the_environment_but_never_runyards_secrets(
    tmp_path, registry: TaskRegistry, server_env: None
) -> None:
    settings = secure_settings(tmp_path)
    settings.worker_env.update(
        EXTRA="added", RUNYARD_TOKEN="via-worker-env", LEAK=SERVER_TOKEN,
        LEAK_BEARER=f"Bearer {SERVER_TOKEN}", LEAK_WRAPPED=f"x{TARGET_TOKEN}y",
    )  # fmt: skip
    ws = Workspace.open(settings.workspace_dir, settings.log_dir)

    status = run_to_end(settings, ws, registry, "envdump", {})

    env = status.result["env"]
    assert env["HF_TOKEN"] == "hf_user_secret" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["AWS_PROFILE"] == "research" and env["EXTRA"] == "added"
    assert "RUNYARD_TOKEN" not in env and "RUNYARD_TARGETS" not in env
    assert holds_a_token(env) == [] and "AUTH" not in env and "LEAK_BEARER" not in env
    assert "PWD" not in env and status.result["cwd"] == str(ws.task_dir(status.task_id))
    assert sorted(k for k in env if k.startswith("RUNYARD_")) == [
        "RUNYARD_METRICS_FILE", "RUNYARD_RUN_ID", "RUNYARD_TASK_DIR", "RUNYARD_TASK_ID",
    ]  # fmt: skip


def test_strict_mode_passes_the_allow_list_only(
    tmp_path, registry: TaskRegistry, server_env: None
) -> None:
    settings = secure_settings(
        tmp_path, task_env="strict",
        env_allowlist=["PATH", "CUDA_VISIBLE_DEVICES", "RUNYARD_TOKEN", "ANOTHER_NAME_FOR_IT",
                       "AUTH", "TARGET_URL"],
    )  # fmt: skip
    ws = Workspace.open(settings.workspace_dir, settings.log_dir)

    env = run_to_end(settings, ws, registry, "envdump", {}).result["env"]

    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "HF_TOKEN" not in env and "AWS_PROFILE" not in env
    # even an allow-list entry cannot hand a task runyard's token
    assert "RUNYARD_TOKEN" not in env and "ANOTHER_NAME_FOR_IT" not in env
    assert "AUTH" not in env and "TARGET_URL" not in env and holds_a_token(env) == []


def test_a_plain_agent_run_keeps_the_allow_list_in_inherit_mode(tmp_path, server_env: None) -> None:
    settings = secure_settings(
        tmp_path, env_allowlist=["PATH", "RUNYARD_TOKEN", "TARGET_COPY", "AUTH", "TARGET_URL"]
    )
    settings.worker_env.update(LEAK=SERVER_TOKEN, LEAK_BEARER=f"Bearer {SERVER_TOKEN}")
    assert settings.task_env == "inherit"
    view = RunView("none", str(tmp_path / "run"), str(tmp_path / "pkg"), "/sock")

    env = run_env(settings, view, {"RUNYARD_API_TOKEN": "run-token"})

    assert "HF_TOKEN" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert "RUNYARD_TOKEN" not in env and "TARGET_COPY" not in env and "LEAK" not in env
    assert holds_a_token(env) == [] and "LEAK_BEARER" not in env and "AUTH" not in env
    assert env["RUNYARD_API_TOKEN"] == "run-token" and "PATH" in env
