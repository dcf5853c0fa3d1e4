"""``runyard config`` (the effective settings and where each came from) and ``runyard info``
(this installation and workspace at a glance). Both take ``--json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer

from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    LogDirOpt,
    WorkspaceOpt,
    fail,
    load_settings,
    print_json,
)
from runyard.errors import RunyardError

CONFIG_FILE = "runyard.yaml"
WORKSPACE_FOLDER = ".runyard"


def config(
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the effective settings and the source of each: default, the config file,
    env RUNYARD_X, .env or command line. Tokens and other credentials are masked."""
    from runyard.cli.facts import effective_settings
    from runyard.config import Settings

    cli = {"workspace_dir": workspace_dir, "log_dir": log_dir}
    settings = load_settings(workspace_dir, log_dir, config)
    config_file = config or _config_in_use()
    try:
        here, origins = Settings.load_with_origins(cli=cli, config_file=config_file)
    except RunyardError as exc:
        fail(str(exc))
    for name in ("workspace_dir", "log_dir"):
        if getattr(here, name) != getattr(settings, name):  # taken from a parent folder
            origins[name] = f"{origins[name]}, found upwards"
    rows = effective_settings(settings, origins)
    named = str(config_file.resolve()) if config_file is not None else None
    if as_json:
        print_json({"config_file": named, "settings": rows})
        return
    typer.echo(f"config file: {named or 'none'}")
    width = max(len(name) for name in rows)
    for name, row in rows.items():
        value = json.dumps(row["value"], ensure_ascii=False)
        typer.echo(f"{name:<{width}}  {value}  ({row['source']})")


def info(
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the version, Python, workspace, server (address, pid, running), task
    definitions, executors, sandbox, cgroup mode and free disk."""
    from runyard.cli.facts import installation_facts

    facts = installation_facts(load_settings(workspace_dir, log_dir, config))
    if as_json:
        print_json(facts)
        return
    for label, text in _info_lines(facts):
        typer.echo(f"{label:<17}{text}")


def _info_lines(facts: dict[str, Any]) -> list[tuple[str, str]]:
    server, sandbox, cgroups, disk = (
        facts["server"], facts["sandbox"], facts["cgroups"], facts["disk"]
    )  # fmt: skip
    if server["url"] is None:
        server_text = "none recorded"
    else:
        state = "running" if server["running"] else "not running"
        server_text = f"{server['url']} (pid {server['pid']}, {state})"
    workspace = facts["workspace"]["path"] + (
        "" if facts["workspace"]["exists"] else " (not yet made)"
    )
    sandbox_text = (
        f"bubblewrap at {sandbox['bwrap']}" if sandbox["available"]
        else f"none ({sandbox['problem']})"
    )  # fmt: skip
    limitable = ", ".join(cgroups["limitable"]) or "nothing"
    cgroup_text = (
        f"{cgroups['mode']} (limits {limitable})" if cgroups["mode"] != "none"
        else "none (limits by setrlimit)"
    )  # fmt: skip
    return [
        ("runyard", facts["version"]),
        ("python", f"{facts['python']['version']} ({facts['python']['executable']})"),
        ("workspace", workspace),
        ("server", server_text),
        ("task definitions", str(facts["task_definitions"])),
        ("executor", f"tasks {facts['executor']['tasks']}; agent runs "
                     f"{facts['executor']['agent_runs']}"),
        ("sandbox", f"{sandbox_text}; agent_sandbox {sandbox['setting']}"),
        ("cgroups", cgroup_text),
        ("free disk", f"{disk['free_mb']} MiB at {disk['path']} (new work refused below "
                      f"{disk['min_free_mb']} MiB)"),
    ]  # fmt: skip


def _config_in_use() -> Path | None:
    """The config file the settings were read from: ``RUNYARD_CONFIG``, else the nearest
    ``runyard.yaml`` from here up to the folder holding a workspace (as commands find it)."""
    named = os.environ.get("RUNYARD_CONFIG")
    if named:
        return Path(named)
    here = Path(os.path.abspath(os.getcwd()))
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder / CONFIG_FILE
        if (folder / WORKSPACE_FOLDER).is_dir():
            return None
    return None
