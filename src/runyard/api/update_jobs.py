"""AxonX 0.2.2's ``python``, ``get_update_status``, ``update_from_pip``, ``update_from_git``
and ``restart_service`` jobs, with its parameters and answers. All are admin only (a run
token gets 403), and all but ``get_update_status`` are off by default:

- ``python`` (``code``, ``timeout`` 0 < t <= 300, 30) needs ``allow_python_job: true``; it
  runs the code in a fresh interpreter contained as a task (:mod:`runyard.runtime.pythoncode`)
  and answers AxonX's ``PythonOutput``, ``success`` only for exit code 0.
- ``update_from_pip``, ``update_from_git`` and ``restart_service`` (``force``, false) need
  ``allow_self_update: true``. The first two pip-install ``self_update_requirement`` or
  ``self_update_git`` into the server's environment and answer the update's record (the
  output in its ``log``); ``restart_service`` answers its record, then re-execs the server
  (:mod:`runyard.api.restart`). ``force`` is accepted and changes nothing: running tasks
  are never cancelled, a restart adopts them.
- ``get_update_status`` (``update_id``) answers AxonX's ``{record, log,
  restart_blockers}`` (no blockers: a restart keeps running tasks) and ``installed``, the
  runyard distribution's version and source (:func:`runyard.api.selfupdate.installed`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from runyard.api import job_args as a
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.restart import request_restart, restart_requested
from runyard.api.selfupdate import Updates, installed
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import Forbidden, UpdateBusy
from runyard.runtime.pythoncode import run_code

MAX_PYTHON_TIMEOUT = 300.0
_updates: dict[Path, Updates] = {}


class PythonArgs(a.Strict):
    code: str = Field(
        min_length=1,
        description="Python source code, including literal newlines. Print results to stdout.",
    )
    timeout: float = Field(
        30,
        gt=0,
        le=MAX_PYTHON_TIMEOUT,
        strict=True,  # a number: "5" or true is refused, as AxonX's schema does
        description="Maximum execution time in seconds.",
    )


class UpdateArgs(a.Strict):
    force: bool = Field(
        False,
        strict=True,
        description="Accepted for AxonX; runyard never cancels running tasks to update.",
    )


class UpdateStatusArgs(a.Strict):
    update_id: str | None = Field(None, pattern="^[0-9a-f]{32}$")


def _admin(name: str, scope: Scope) -> None:
    if scope is not None:
        raise Forbidden(f"{name} needs the server (admin) token")


def _allowed(name: str, setting: str, on: bool) -> None:
    if not on:
        raise Forbidden(f"{name} is off on this server: set {setting}: true to allow it")


def updates(s: Services) -> Updates:
    folder = Path(s.settings.workspace_dir).resolve()
    return _updates.setdefault(folder, Updates(folder))


async def _python(s: Services, args: PythonArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    _admin("python", scope)
    _allowed("python", "allow_python_job", s.settings.allow_python_job)
    result = await run_in_threadpool(run_code, args.code, args.timeout, s.settings)
    return result.answer(), result.succeeded, {"limits": result.limits}


async def _update_status(
    s: Services, args: UpdateStatusArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    _admin("get_update_status", scope)
    status = await run_in_threadpool(updates(s).status, args.update_id)
    return {**status, "restart_blockers": [], "installed": installed()}, True


async def _install(s: Services, name: str, mode: str, requirement: str | None) -> JobResult:
    if requirement is None:
        raise Forbidden(f"{name} needs self_update_git: a pip VCS requirement to install")
    timeout = s.settings.self_update_timeout_seconds
    record = await run_in_threadpool(updates(s).install, mode, requirement, timeout)
    status = await run_in_threadpool(updates(s).status, record["update_id"])
    return {**record, "log": status["log"]}, record["phase"] == "succeeded"


async def _from_pip(s: Services, args: UpdateArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    _admin("update_from_pip", scope)
    _allowed("update_from_pip", "allow_self_update", s.settings.allow_self_update)
    return await _install(s, "update_from_pip", "pip", s.settings.self_update_requirement)


async def _from_git(s: Services, args: UpdateArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    _admin("update_from_git", scope)
    _allowed("update_from_git", "allow_self_update", s.settings.allow_self_update)
    return await _install(s, "update_from_git", "git", s.settings.self_update_git)


async def _restart(s: Services, args: UpdateArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    _admin("restart_service", scope)
    _allowed("restart_service", "allow_self_update", s.settings.allow_self_update)
    if restart_requested():  # a second SIGTERM would cut the first one's orderly stop short
        raise UpdateBusy("A restart is already under way")
    if updates(s).busy:  # the stop would kill pip half-way, past its drain
        raise UpdateBusy("An update is running; restart once get_update_status says it ended")
    record, path = await run_in_threadpool(updates(s).new_record, "restart")
    request_restart(path)
    return record, True


PYTHON = Job(
    "python",
    "Run Python code in a fresh interpreter under the task limits (allow_python_job).",
    PythonArgs,
    dict[str, Any],
    _python,
)
GET_UPDATE_STATUS = Job(
    "get_update_status",
    "The installed version and its source, and an update's record and log tail.",
    UpdateStatusArgs,
    dict[str, Any],
    _update_status,
)
UPDATE_FROM_PIP = Job(
    "update_from_pip",
    "pip-install self_update_requirement into the server's environment (allow_self_update).",
    UpdateArgs,
    dict[str, Any],
    _from_pip,
)
UPDATE_FROM_GIT = Job(
    "update_from_git",
    "pip-install self_update_git into the server's environment (allow_self_update).",
    UpdateArgs,
    dict[str, Any],
    _from_git,
)
RESTART_SERVICE = Job(
    "restart_service",
    "Re-exec the server after an orderly stop; running tasks keep going (allow_self_update).",
    UpdateArgs,
    dict[str, Any],
    _restart,
)
UPDATE_JOBS = (PYTHON, GET_UPDATE_STATUS, UPDATE_FROM_PIP, UPDATE_FROM_GIT, RESTART_SERVICE)
