"""AxonX 0.2.2's plugin jobs: ``list_plugins``, ``inspect_plugin``, ``install_plugin`` and
``uninstall_plugin``, over the task registry and the server's own pip.

A plugin is an installed distribution that registers runyard tasks; each answer is in
AxonX's ``PluginInfo`` shape (:mod:`runyard.tasks.plugininfo`). All four are admin only
(a run token gets 403): a plugin list names the server's code, an install changes it.

``install_plugin`` takes AxonX's ``path`` (a wheel in the workspace, relative to it) with
its ``sha256``, or runyard's ``requirement`` (a PEP 508 requirement pip resolves), and
``uninstall_plugin`` a plugin's distribution or task name; pip runs on the server's own
interpreter (:mod:`runyard.tasks.pipinstall`), one at a time, killed past
``plugin_install_timeout_seconds``. Both are refused (403, naming the setting) unless
``allow_plugin_install: true``. Only a distribution that registers tasks is uninstalled:
runyard itself and its dependencies are not plugins. After pip, the registry rescans at
once, so a new plugin's tasks can be submitted with no restart; ``restart_required`` says
when the server still runs code the change replaced. pip's output is the envelope's
``metadata.pip_output``; a pip that fails answers ``success: false`` with it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from starlette.concurrency import run_in_threadpool

from runyard.api import job_args as a
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import Forbidden, InvalidInput
from runyard.tasks import pipinstall
from runyard.tasks.plugininfo import find_plugin, list_plugins

SHA256_PATTERN = "^[0-9a-fA-F]{64}$"


class InspectPluginArgs(a.Lenient):
    plugin: str = Field(min_length=1, description="Distribution or plugin name to inspect.")


class InstallPluginArgs(a.Strict):
    path: str | None = Field(
        None, min_length=1, description="Workspace-relative path of the plugin wheel."
    )
    sha256: str | None = Field(
        None, pattern=SHA256_PATTERN, description="SHA-256 of the wheel at path."
    )
    requirement: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="runyard: a PEP 508 requirement to install instead of a wheel.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> InstallPluginArgs:
        wheel = self.path is not None or self.sha256 is not None
        if wheel == (self.requirement is not None):
            raise ValueError("give path and sha256 (a wheel), or requirement, not both")
        if wheel and (self.path is None or self.sha256 is None):
            raise ValueError("a wheel needs both path and sha256")
        return self


class UninstallPluginArgs(a.Strict):
    plugin: str = Field(min_length=1, description="Distribution or plugin name to uninstall.")


def _admin(job: str, scope: Scope) -> None:
    if scope is not None:
        raise Forbidden(f"{job} needs the server (admin) token")


def _allowed(job: str, s: Services, scope: Scope) -> None:
    _admin(job, scope)
    if not s.settings.allow_plugin_install:
        raise Forbidden(f"{job} is off on this server: set allow_plugin_install: true to use it")


async def _list_plugins(
    s: Services, args: a.NoArguments, hub: ChangeHub, scope: Scope
) -> JobResult:
    _admin("list_plugins", scope)
    await run_in_threadpool(s.registry.rescan)
    return await run_in_threadpool(list_plugins, dict(s.registry.errors)), True


async def _inspect_plugin(
    s: Services, args: InspectPluginArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    _admin("inspect_plugin", scope)
    await run_in_threadpool(s.registry.rescan)
    return await run_in_threadpool(find_plugin, args.plugin, dict(s.registry.errors)), True


async def _install_plugin(
    s: Services, args: InstallPluginArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    _allowed("install_plugin", s, scope)
    timeout = s.settings.plugin_install_timeout_seconds
    try:
        if args.requirement is not None:
            outcome = await run_in_threadpool(
                pipinstall.install_requirement, args.requirement, timeout
            )
        else:
            assert args.path is not None and args.sha256 is not None  # the validator's
            outcome = await run_in_threadpool(
                pipinstall.install_wheel, s.workspace.root, args.path, args.sha256, timeout
            )
    except pipinstall.PipFailed as exc:
        return str(exc), False
    info = await _after_pip(s, outcome.distribution)
    return {**info, "restart_required": _restart_required(s, info)}, True, _pip(outcome)


async def _uninstall_plugin(
    s: Services, args: UninstallPluginArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    _allowed("uninstall_plugin", s, scope)
    info = await run_in_threadpool(find_plugin, args.plugin, dict(s.registry.errors))
    timeout = s.settings.plugin_install_timeout_seconds
    try:
        outcome = await run_in_threadpool(pipinstall.uninstall, info["distribution"], timeout)
    except pipinstall.PipFailed as exc:
        return str(exc), False
    await run_in_threadpool(s.registry.rescan, force=True)
    answer = {"distribution": info["distribution"], "restart_required": _restart_required(s, info)}
    return answer, True, _pip(outcome)


async def _after_pip(s: Services, distribution: str) -> dict[str, Any]:
    """The plugin pip just installed, once the registry has rescanned."""
    await run_in_threadpool(s.registry.rescan, force=True)
    try:
        return await run_in_threadpool(find_plugin, distribution, dict(s.registry.errors))
    except InvalidInput:
        raise InvalidInput(
            f"pip installed {distribution}, which registers no runyard task "
            "(no entry point in the runyard.tasks group); it stays installed"
        ) from None


def _restart_required(s: Services, info: dict[str, Any]) -> bool:
    return any(task in s.registry.restart_required for task in info["plugins"])


def _pip(outcome: pipinstall.PipOutcome) -> dict[str, Any]:
    return {"pip_output": outcome.output}


PLUGIN_JOBS = (
    Job(
        "list_plugins",
        "List installed plugins and their contributions.",
        a.NoArguments,
        list[dict[str, Any]],
        _list_plugins,
    ),
    Job(
        "inspect_plugin",
        "Inspect one plugin installed on this service machine.",
        InspectPluginArgs,
        dict[str, Any],
        _inspect_plugin,
    ),
    Job(
        "install_plugin",
        "Install a plugin wheel already copied into this workspace, or a requirement.",
        InstallPluginArgs,
        dict[str, Any],
        _install_plugin,
    ),
    Job(
        "uninstall_plugin",
        "Uninstall a plugin distribution from this service machine.",
        UninstallPluginArgs,
        dict[str, Any],
        _uninstall_plugin,
    ),
)
