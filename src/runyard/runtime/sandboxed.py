"""Workers of run-submitted tasks: the same isolation as the agent run that submitted them.

    problem = task_sandbox_problem(settings)        # None when tasks can be sandboxed
    prepare_sandbox_dir(settings, task_dir, status)
    spec = sandboxed_worker_spec(settings, workspace, status, target, session_id, log_path)

Such a worker runs in its own bubblewrap sandbox (never as a plain host process, never
through the pre-forked zygote), as the agent-run user (``agent_run_uid``/``gid``), with
the agent limits (``agent_limits``) and network only when runs have it
(``agent_network``). Inside it sees, at paths that say nothing about the host::

    /runyard/workspace/<type>/<task_id>          its own files, read-write: the host folder
                                                 <task folder>/.sandbox, moved into the task
                                                 folder when the run ends
    /runyard/workspace/<type>/<upstream id>      upstream tasks of its session, read-only
    /tmp                                         a private tmpfs

plus the Python installation and the import path the worker needs, read-only, and the
host's system folders as every sandbox sees them. Its environment is the sandbox's PATH,
``worker_env`` (minus runyard's tokens) and the ``RUNYARD_*`` variables the worker reads —
never the server's, whatever ``task_env`` says.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from runyard.config import Settings
from runyard.errors import ConfigError
from runyard.executors.base import LaunchSpec, Limits, Mount
from runyard.executors.sandbox import find_bwrap, probe_bwrap, wrap_spec
from runyard.privacy import grant_passage
from runyard.runtime.environment import without_secrets
from runyard.runtime.recordkeeper import KeeperPayload
from runyard.runtime.sandboxfiles import adopt_sandbox_files, sandbox_dir
from runyard.runtime.submitters import session_of
from runyard.runtime.worker import WorkerPayload
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.identity import is_task_id, parse_task_id
from runyard.workspace.layout import STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus

SANDBOX_WORKSPACE = "/runyard/workspace"
SANDBOX_LOGS = "/runyard/logs"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
WORKER_MODULE = "runyard.runtime.worker"
KEEPER_MODULE = "runyard.runtime.recordkeeper"
MIB = 1 << 20


def user_prefix(settings: Settings) -> list[str]:
    """``setpriv`` to the agent-run user when it differs from the server's (as agent runs)."""
    uid = os.getuid() if settings.agent_run_uid is None else settings.agent_run_uid
    gid = os.getgid() if settings.agent_run_gid is None else settings.agent_run_gid
    if (uid, gid) == (os.getuid(), os.getgid()):
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ConfigError("agent_run_uid/agent_run_gid need setpriv (util-linux) installed")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def prepare_sandbox_dir(settings: Settings, task_dir: Path, status: TaskStatus) -> Path:
    """Make the folder the task sees as its own (``.sandbox`` in its task folder), with a
    copy of its ``queued`` status for its worker to start from; the run user owns it and
    is given passage to it through the workspace root, the type folder and the task folder
    (its sandbox is made as the run user, who must reach it to mount it). The task folder
    itself, and the records in it, stay the server user's.
    """
    sandbox = sandbox_dir(task_dir)
    adopt_sandbox_files(task_dir)  # a folder an earlier launch of this run left: emptied
    sandbox.mkdir(mode=0o700)
    write_json_atomic(sandbox / STATUS_FILE, status.to_json(), fsync=False)
    uid, gid = settings.agent_run_uid, settings.agent_run_gid
    if uid is None and gid is None:
        return sandbox
    passage_gid = os.getgid() if gid is None else gid
    for folder in (task_dir.parent.parent, task_dir.parent, task_dir):
        grant_passage(folder, passage_gid, settings.workspace_mode)
    owner = (-1 if uid is None else uid, -1 if gid is None else gid)
    os.chown(sandbox, *owner, follow_symlinks=False)
    os.chmod(sandbox, 0o2770, follow_symlinks=False)
    os.chown(sandbox / STATUS_FILE, *owner, follow_symlinks=False)
    return sandbox


def task_sandbox_problem(settings: Settings) -> str | None:
    """Why run-submitted tasks cannot be sandboxed here, or None when they can.

    The same probe as agent runs, run as the run user: a sandbox that does not start is no
    sandbox. Kubernetes agent runs have no local sandbox to share with their tasks.
    """
    if settings.agent_executor == "kubernetes":
        return "agent runs execute on Kubernetes, where their tasks cannot run sandboxed yet"
    if settings.agent_sandbox == "none":
        return "agent_sandbox is 'none', so their tasks could not run sandboxed"
    try:
        prefix = user_prefix(settings)
    except ConfigError as exc:
        return str(exc)
    return probe_bwrap(find_bwrap(), prefix)


def inner_task_dir(task_id: str) -> str:
    tid = parse_task_id(task_id)
    return f"{SANDBOX_WORKSPACE}/{tid.task_type}/{tid}"


def agent_limits(settings: Settings) -> Limits:
    limits = settings.agent_limits
    memory = None if limits.memory_mb is None else limits.memory_mb * MIB
    return Limits(memory_bytes=memory, pids=limits.pids, cpu=limits.cpu)


def sandboxed_worker_spec(
    settings: Settings,
    workspace: Workspace,
    status: TaskStatus,
    target: str,
    session_id: str,
    log_path: Path,
) -> LaunchSpec:
    """The launch of ``status``'s worker inside a sandbox of session ``session_id``, behind
    its record keeper (:mod:`runyard.runtime.recordkeeper`): the process launched is the
    keeper, on the host, which starts the sandbox and writes the records the worker sends.
    Call :func:`prepare_sandbox_dir` first."""
    inner = inner_task_dir(status.task_id)
    worker = WorkerPayload(
        workspace=SANDBOX_WORKSPACE, log_dir=SANDBOX_LOGS,
        task_id=status.task_id, run_id=status.run_id, target=target,
    )  # fmt: skip
    task_dir = workspace.task_dir(status.task_id)
    mounts = [Mount(sandbox_dir(task_dir), inner)]
    mounts += upstream_mounts(workspace, status, session_id)
    mounts += python_mounts(workspace)
    spec = LaunchSpec(
        argv=[sys.executable, "-m", WORKER_MODULE],
        log_path=log_path,
        cwd=Path(inner),
        env=sandbox_env(settings, status, inner),
        mounts=mounts,
        labels={
            "runyard.task_id": status.task_id, "runyard.run_id": status.run_id,
            "runyard.session": session_id,
        },
        limits=agent_limits(settings),
        network=settings.agent_network,
    )  # fmt: skip
    wrapped = wrap_spec(find_bwrap() or "bwrap", spec)
    sandbox = [*user_prefix(settings), *with_private_tmp(wrapped.argv)]
    keeper = KeeperPayload(
        workspace=os.path.abspath(workspace.root), log_dir=os.path.abspath(workspace.log_dir),
        task_id=status.task_id, run_id=status.run_id, argv=sandbox,
        worker_stdin=worker.dump().decode(),
    )  # fmt: skip
    return replace(wrapped, argv=[sys.executable, "-m", KEEPER_MODULE], stdin=keeper.dump())


def sandbox_env(settings: Settings, status: TaskStatus, inner_dir: str) -> dict[str, str]:
    env = {"PATH": SANDBOX_PATH}
    env.update(without_secrets(settings.worker_env, settings))
    env.update(HOME="/tmp", TMPDIR="/tmp", LANG=env.get("LANG", "C.UTF-8"))
    env.update(
        RUNYARD_TASK_ID=status.task_id, RUNYARD_RUN_ID=status.run_id,
        RUNYARD_TASK_DIR=inner_dir, PYTHONDONTWRITEBYTECODE="1",
    )  # fmt: skip
    return env


def with_private_tmp(argv: list[str]) -> list[str]:
    """A tmpfs ``/tmp`` (the task folder holds artifacts, so scratch files do not belong
    there), made before any bind: a bind below ``/tmp`` — the interpreter of a checkout
    under ``/tmp``, a workspace there — is then laid over it instead of hidden by it."""
    at = argv.index("--dev") + 2  # the end of the system view, before the spec's mounts
    return [*argv[:at], "--tmpfs", "/tmp", *argv[at:]]


def upstream_mounts(workspace: Workspace, status: TaskStatus, session_id: str) -> list[Mount]:
    """``source_tasks`` of the same session, read-only; others stay invisible (not an error:
    refusing would tell the task that they exist)."""
    raw = status.config.get("source_tasks") or ""
    mounts = []
    for task_id in str(raw).split(","):
        task_id = task_id.strip()
        if not task_id or task_id == status.task_id or not is_task_id(task_id):
            continue
        folder = workspace.task_dir(task_id)
        if session_of(workspace, task_id) == session_id and _real_dir(folder):
            mounts.append(Mount(folder, inner_task_dir(task_id), read_only=True))
    return mounts


def python_mounts(workspace: Workspace) -> list[Mount]:
    """The interpreter, the venv and the import path, read-only, at their own paths.

    Never the server's working folder or a folder around the workspace or the logs:
    those may hold the server's secrets (``.env``, ``server.json``) or other tasks.
    """
    keep = {os.path.realpath(p) for p in _import_roots()}
    cwd = os.path.realpath(os.getcwd())
    guarded = [os.path.realpath(p) for p in (workspace.root, workspace.log_dir)]
    chosen = sorted(p for p in keep if _safe_to_show(p, cwd, guarded))
    return [Mount(Path(p), p, read_only=True) for p in _outermost(chosen)]


def _import_roots() -> list[str]:
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    roots += [entry for entry in sys.path if entry and os.path.isabs(entry)]
    return [root for root in roots if os.path.isdir(root)]


def _safe_to_show(path: str, cwd: str, guarded: list[str]) -> bool:
    if path in ("/", "/usr") or path.startswith("/usr/"):
        return False  # the system view already shows /usr
    if path == cwd or _inside(cwd, path):
        return False
    for other in guarded:
        if other == path or _inside(other, path) or _inside(path, other):
            return False
    return True


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _outermost(paths: list[str]) -> list[str]:
    chosen: list[str] = []
    for path in paths:  # sorted: a folder comes before what it holds
        if not any(_inside(path, outer) for outer in chosen):
            chosen.append(path)
    return chosen


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()
