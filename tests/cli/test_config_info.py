"""``runyard config``, ``runyard info`` and config typos, through the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_proc import CLI, base_env

from runyard.executors.sandbox import find_bwrap, probe_bwrap
from runyard.tasks.registry import TaskRegistry
from serverproc import start_server

TYPO = (
    "error: unknown setting 'max_concurent_tasks' in runyard.yaml; "
    "did you mean 'max_concurrent_tasks'?\n"
)
SECRETS = ("yaml-token-3c1f9e", "target-token-77d0aa", "hf_worker_env_5b2c")


def runyard(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env={**base_env(), **env}, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_config_typo_stops_every_command_and_the_server(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text("max_concurent_tasks: 2\n")
    (tmp_path / "sub").mkdir()
    for cwd, args in (
        (tmp_path, ["ls"]),
        (tmp_path / "sub", ["config"]),  # found upwards, refused all the same
        (tmp_path, ["serve", "--host", "127.0.0.1", "--port", "0"]),
    ):
        done = runyard(cwd, *args)
        assert done.returncode != 0, (args, done.stdout)
        assert done.stderr == TYPO, (args, done.stderr)


def test_config_shows_each_source_and_masks_credentials(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text(
        f"token: {SECRETS[0]}\nmax_concurrent_tasks: 3\n"
        f"targets: {{lab: {{url: 'http://127.0.0.1:9', token: {SECRETS[1]}}}}}\n"
        f"worker_env: {{HF_TOKEN: {SECRETS[2]}, HF_HOME: /data/hf}}\n"
    )
    args = ["config", "--log-dir", str(tmp_path / "l")]
    shown = runyard(tmp_path, *args, "--json", RUNYARD_PORT="4321")
    human = runyard(tmp_path, *args, RUNYARD_PORT="4321")

    assert shown.returncode == 0 and human.returncode == 0, shown.stderr + human.stderr
    for secret in SECRETS:
        assert secret not in shown.stdout and secret not in human.stdout
    report = json.loads(shown.stdout)
    rows = report["settings"]
    config_file = str(tmp_path / "runyard.yaml")
    assert report["config_file"] == config_file
    assert rows["max_concurrent_tasks"] == {"value": 3, "source": config_file}
    assert rows["port"] == {"value": 4321, "source": "env RUNYARD_PORT"}
    assert rows["log_dir"] == {"value": str(tmp_path / "l"), "source": "command line"}
    assert rows["host"] == {"value": "127.0.0.1", "source": "default"}
    assert rows["token"]["value"] == "********"
    assert rows["targets"]["value"]["lab"] == {"url": "http://127.0.0.1:9", "token": "********"}
    assert rows["worker_env"]["value"] == {"HF_TOKEN": "********", "HF_HOME": "/data/hf"}
    assert rows["task_env"] == {"value": "inherit", "source": "default"}
    assert "port" in human.stdout and "(env RUNYARD_PORT)" in human.stdout
    (tmp_path / "below").mkdir()
    below = json.loads(runyard(tmp_path / "below", "config", "--json").stdout)["settings"]
    assert below["workspace_dir"] == {
        "value": str(tmp_path / ".runyard"), "source": "default, found upwards",
    }  # fmt: skip
    assert below["max_concurrent_tasks"]["source"] == config_file


def test_info_reports_the_server_and_this_host(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    args = ["info", "--workspace-dir", str(server.workspace)]
    try:
        shown = runyard(tmp_path, *args, "--json")
        human = runyard(tmp_path, *args)
    finally:
        server.stop()
    stopped = runyard(tmp_path, *args, "--json")

    assert shown.returncode == 0 and human.returncode == 0, shown.stderr + human.stderr
    assert server.token and server.token not in shown.stdout + human.stdout
    facts = json.loads(shown.stdout)
    assert facts["server"] == {"url": server.url, "pid": server.proc.pid, "running": True}
    assert facts["workspace"] == {"path": str(server.workspace), "exists": True}
    assert facts["task_definitions"] == len(TaskRegistry.load().tasks) > 0
    assert facts["sandbox"]["available"] is (probe_bwrap(find_bwrap()) is None)
    assert facts["cgroups"]["mode"] in ("cgroup2", "cgroup1", "none")
    assert facts["disk"]["free_mb"] > 0 and facts["version"]
    assert f"{server.url} (pid {server.proc.pid}, running)" in human.stdout
    assert json.loads(stopped.stdout)["server"]["running"] is False


def test_info_says_where_task_workers_run(tmp_path: Path) -> None:
    (tmp_path / "runyard.yaml").write_text(
        "task_executor: kubernetes\ntask_executors: {demo: local, command: kubernetes}\n"
        "kubernetes: {image: registry.example/runyard:1}\n"
    )
    shown = runyard(tmp_path, "info", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["executor"]["tasks"] == "kubernetes; local for demo"
    (tmp_path / "runyard.yaml").write_text("prefork: false\n")
    plain = runyard(tmp_path, "info", "--json")
    assert json.loads(plain.stdout)["executor"]["tasks"] == "local"
