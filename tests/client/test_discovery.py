"""find_server: the environment, then the workspace found upwards, then the config; and a
recorded token never travels to another address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runyard.client import Client, find_server
from runyard.errors import ServerNotFound
from serverproc import ServerProcess

NO_ENV: dict[str, str] = {}


def record(workspace: Path, url: str, token: str | None, pid: int | None = None) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    path = workspace / "server.json"
    info = {"url": url, "pid": pid or os.getpid(), "token": token, "started_at": "now"}
    path.write_text(json.dumps(info))
    return path


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_the_environment_comes_first(tmp_path: Path) -> None:
    record(tmp_path / ".runyard", "http://127.0.0.1:1", "recorded")
    env = {"RUNYARD_URL": "http://127.0.0.1:2/", "RUNYARD_TOKEN": "from-env"}
    found = find_server(tmp_path, env)
    assert (found.url, found.token) == ("http://127.0.0.1:2", "from-env")


def test_a_dot_runyard_workspace_is_found_from_a_subfolder(tmp_path: Path) -> None:
    record(tmp_path / "project" / ".runyard", "http://127.0.0.1:3", "t3")
    deep = tmp_path / "project" / "src" / "pkg"
    deep.mkdir(parents=True)
    found = find_server(deep, NO_ENV)
    assert (found.url, found.token) == ("http://127.0.0.1:3", "t3")
    assert found.workspace == tmp_path / "project" / ".runyard"


def test_the_current_folder_may_be_the_workspace(tmp_path: Path) -> None:
    record(tmp_path / "ws", "http://127.0.0.1:4", None)
    found = find_server(tmp_path / "ws", NO_ENV)
    assert (found.url, found.token, found.workspace) == (
        "http://127.0.0.1:4",
        None,
        tmp_path / "ws",
    )


def test_the_nearest_workspace_wins(tmp_path: Path) -> None:
    record(tmp_path / ".runyard", "http://127.0.0.1:5", "outer")
    record(tmp_path / "inner" / ".runyard", "http://127.0.0.1:6", "inner")
    assert find_server(tmp_path / "inner", NO_ENV).token == "inner"


def test_another_tools_server_json_is_not_a_workspace(tmp_path: Path) -> None:
    record(tmp_path / "project" / ".runyard", "http://127.0.0.1:10", "t10")
    (tmp_path / "project" / "web").mkdir()
    (tmp_path / "project" / "web" / "server.json").write_text('{"port": 3000}')
    assert find_server(tmp_path / "project" / "web", NO_ENV).token == "t10"


def test_the_config_names_the_workspace(tmp_path: Path) -> None:
    elsewhere = tmp_path / "data" / "ws"
    record(elsewhere, "http://127.0.0.1:7", "recorded")
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "runyard.yaml").write_text(f"workspace_dir: {elsewhere}\n")
    found = find_server(folder, NO_ENV)
    assert (found.url, found.token, found.workspace) == (
        "http://127.0.0.1:7",
        "recorded",
        elsewhere,
    )


def test_the_client_and_the_cli_find_the_same_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one rule for both: the nearest folder decides, and a runyard.yaml there names the
    # workspace relative to its own folder, even with a .runyard further up
    from runyard.cli.locate import settings_found_upwards

    for name in [n for n in os.environ if n.startswith("RUNYARD_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    record(tmp_path / ".runyard", "http://127.0.0.1:11", "outer")
    project = tmp_path / "project"
    record(project / "data", "http://127.0.0.1:12", "named")
    (project / "runyard.yaml").write_text("workspace_dir: data\n")
    deep = project / "src"
    deep.mkdir()
    found = find_server(deep, NO_ENV)
    assert (found.url, found.workspace) == ("http://127.0.0.1:12", project / "data")
    assert settings_found_upwards({}, None, deep).workspace_dir == project / "data"
    # a workspace folder itself (it holds server.json) is found from inside it, by both
    inside = project / "data" / "tasks"
    inside.mkdir()
    assert find_server(inside, NO_ENV).workspace == project / "data"
    assert settings_found_upwards({}, None, inside).workspace_dir == project / "data"


def test_nothing_found_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ServerNotFound) as info:
        find_server(tmp_path, NO_ENV)
    message = str(info.value)
    assert "RUNYARD_URL" in message and "runyard serve" in message
    assert "Error" not in message and "find_server" not in message and message.count(". ") == 0


def test_a_dead_servers_record_is_not_used(tmp_path: Path) -> None:
    record(tmp_path / ".runyard", "http://127.0.0.1:8", "stale", pid=dead_pid())
    with pytest.raises(ServerNotFound, match="No runyard server is running for the workspace"):
        find_server(tmp_path, NO_ENV)


def test_a_recorded_token_never_goes_to_another_address(tmp_path: Path) -> None:
    # A workspace in the current folder must not hand its token to whatever RUNYARD_URL
    # names: that address may belong to someone else.
    record(tmp_path / ".runyard", "http://127.0.0.1:9", "secret")
    found = find_server(tmp_path, {"RUNYARD_URL": "http://attacker.example:80"})
    assert (found.url, found.token) == ("http://attacker.example:80", None)
    same = find_server(tmp_path, {"RUNYARD_URL": "http://127.0.0.1:9/"})
    assert same.token == "secret"


def test_client_without_arguments_talks_to_the_found_server(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("RUNYARD_")]:
        monkeypatch.delenv(name)
    inside = server.workspace / "some" / "folder"
    inside.mkdir(parents=True)
    monkeypatch.chdir(inside)
    with Client() as client:
        assert client.url == server.url.rstrip("/")
        handle = client.submit("demo", name="found", x=1, y=1)
        assert client.wait(handle, timeout=60).result["result"] == 2
