"""How a run is started: the sandbox choice, what the run sees, and the final LaunchSpec.

With bubblewrap the run sees the pod layout::

    /workspace/in  /workspace/out  /workspace/tmp   (also /tmp)   read-write
    /workspace/in/<hard-linked input>                             read-only
    /workspace/state                                               the session's state folder
    /workspace/mounts/<grant name>                                 ro or rw, as granted
    /opt/agent/package                                             read-only
    /run/runyard/api.sock                                          the runyard API

On Kubernetes the run is a pod with the same layout. It reaches the Job API through the
socket under ``/var/run/runyard-api`` where the pod shares its node's folders (hostPath),
or over TCP at ``kubernetes.job_api_url`` (``$RUNYARD_API_URL``; required with ``pvc``
volumes, where a pod may land on any node) — then no socket is mounted at all.
Without either the run is a plain process: ``$RUNYARD_WORKSPACE`` is the run's own folder,
holding ``in``, ``out``, ``tmp`` and the links ``state`` and ``mounts/<name>``, so the same
relative paths work. Either way a small shell records the exit code, so a run that ends
while the server is down still reports how it ended: outside the sandbox in the run folder
(``exit-code``), or, in a pod, in the run's own ``tmp/`` (:data:`POD_EXIT_FILE`), the one
folder there both the pod may write and the server reads.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runyard.agents.context import RunView, SandboxChoice
from runyard.agents.layout import NODE_FLAGS, Ownership
from runyard.config import Settings
from runyard.errors import ConfigError
from runyard.executors.base import Executor, LaunchSpec, Limits, Mount
from runyard.executors.containment import planned_limits
from runyard.executors.sandbox import find_bwrap, probe_bwrap, wrap_spec
from runyard.runtime.environment import allowlisted, without_secrets

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_PACKAGE = "/opt/agent/package"
SANDBOX_SOCKET_DIR = "/run/runyard"
POD_SOCKET_DIR = "/var/run/runyard-api"  # /run/runyard is the Kubernetes executor's
EXIT_RECORDER = 'f=$1; shift; umask 007; "$@"; c=$?; echo "$c" > "$f"; exit "$c"'
# a pod's: its umask stays the image's (the server reads what the pod writes), and as the
# container's PID 1 it passes SIGTERM on to the agent (the kubelet signals PID 1 only),
# then waits for the agent's own end
POD_EXIT_RECORDER = (
    'f=$1; shift; trap \'kill -TERM "$p" 2>/dev/null\' TERM INT; "$@" <&0 & p=$!; '
    'wait "$p"; c=$?; while kill -0 "$p" 2>/dev/null; do wait "$p"; c=$?; done; '
    'echo "$c" > "$f"; exit "$c"'
)
POD_EXIT_FILE = ".runyard-exit-code"  # in the run's tmp/: what a pod's recorder writes
EXIT_FILE_BYTES = 32
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def user_prefix(owner: Ownership) -> list[str]:
    """``setpriv`` to the run user when runs execute as another user than the server."""
    if not owner.differs:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ConfigError("agent_run_uid/agent_run_gid need setpriv (util-linux) installed")
    uid, gid = owner.effective_uid, owner.effective_gid
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def choose_sandbox(settings: Settings, owner: Ownership) -> SandboxChoice:
    if settings.agent_executor == "kubernetes":
        return SandboxChoice("kubernetes")
    if settings.agent_sandbox == "none":
        return SandboxChoice("none", reason="agent_sandbox is 'none'")
    bwrap = find_bwrap()
    problem = probe_bwrap(bwrap, user_prefix(owner))
    required = settings.agent_sandbox == "bwrap"
    if problem is not None:
        return SandboxChoice("none", bwrap, problem, required)
    return SandboxChoice("bwrap", bwrap, "", required)


@dataclass
class RunPlan:
    """Everything the launch of one run needs (host paths unless said otherwise)."""

    run_id: str
    session_id: str
    run_dir: Path
    state_dir: Path
    package_dir: Path
    socket_path: Path | None  # None: the run reaches the Job API over TCP
    log_path: Path
    exit_file: Path
    argv: list[str]
    env: dict[str, str]
    read_only_inputs: list[str] = field(default_factory=list)
    grants: list[tuple[str, Path, bool]] = field(default_factory=list)
    python_root: str | None = None
    network: bool = False
    limits: Limits = field(default_factory=Limits)  # memory, pids, cpu (agent_limits)


def job_api_url(settings: Settings) -> str | None:
    """The URL a run reaches the Job API at over TCP, or None when it uses the socket.

    Only pods do (``kubernetes.job_api_url``), and with ``pvc`` volumes they must: the
    socket is a file on the server's node. ConfigError when that URL is missing.
    """
    k8s = settings.kubernetes
    if settings.agent_executor != "kubernetes" or k8s is None:
        return None
    if k8s.job_api_url is None and k8s.volume_mode == "pvc":
        raise ConfigError(
            "agent_executor 'kubernetes' with kubernetes.volume_mode 'pvc' needs "
            "kubernetes.job_api_url: the address run pods reach the Task Job API at over TCP "
            "(e.g. http://runyard.runyard.svc:8765, the Service of `runyard kubernetes "
            "manifests`); a pod on another node cannot reach the server's Unix socket"
        )
    return k8s.job_api_url


def view_for(
    choice: SandboxChoice, plan_dir: Path, package_dir: Path, socket: Path, api_url: str | None
) -> RunView:
    """Paths as the run sees them; a run given ``api_url`` has no socket (``api_socket``
    is empty)."""
    if choice.mode in ("bwrap", "kubernetes"):
        folder = SANDBOX_SOCKET_DIR if choice.mode == "bwrap" else POD_SOCKET_DIR
        seen = "" if api_url else f"{folder}/{socket.name}"
        return RunView(choice.mode, SANDBOX_WORKSPACE, SANDBOX_PACKAGE, seen, api_url or "")
    return RunView("none", str(plan_dir), str(package_dir), str(socket))


def run_env(settings: Settings, view: RunView, extra: dict[str, str]) -> dict[str, str]:
    """The run's environment: allow-listed host variables (plain runs), then runyard's.

    Always the allow-list, whatever ``task_env`` says: the server's environment never
    reaches agent code, and runyard's tokens never do, not even through ``worker_env``.
    """
    env: dict[str, str] = {}
    if view.isolation == "none":
        env.update(allowlisted(settings))
    elif view.isolation == "bwrap":
        env["PATH"] = SANDBOX_PATH  # a pod keeps its image's PATH
    env.update(without_secrets(settings.worker_env, settings))
    tmp = view.path("tmp")
    env.update({"HOME": tmp, "TMPDIR": tmp, "LANG": env.get("LANG", "C.UTF-8")})
    env.update(
        RUNYARD_WORKSPACE=view.workspace,
        RUNYARD_CONTEXT=view.path("in/run-context.json"),
        RUNYARD_STATE_DIR=view.path("state"),
        RUNYARD_PACKAGE_DIR=view.package_dir,
        RUNYARD_ISOLATION=view.isolation,
        PYTHONDONTWRITEBYTECODE="1",
    )
    if view.api_url:
        env["RUNYARD_API_URL"] = view.api_url
    else:
        env["RUNYARD_API_SOCKET"] = view.api_socket
    env.update(extra)
    return env


def sandbox_mounts(plan: RunPlan, socket_dir: str = SANDBOX_SOCKET_DIR) -> list[Mount]:
    """The pod layout as mounts (bubblewrap binds them; Kubernetes makes them volumes)."""
    ws = SANDBOX_WORKSPACE
    mounts = [Mount(plan.run_dir / name, f"{ws}/{name}") for name in ("in", "out", "tmp")]
    mounts.append(Mount(plan.run_dir / "tmp", "/tmp"))
    mounts += [
        Mount(plan.run_dir / "in" / rel, f"{ws}/in/{rel}", read_only=True)
        for rel in plan.read_only_inputs
    ]
    mounts.append(Mount(plan.state_dir, f"{ws}/state"))
    mounts.append(Mount(plan.package_dir, SANDBOX_PACKAGE, read_only=True))
    if plan.socket_path is not None:
        mounts.append(Mount(plan.socket_path.parent, socket_dir, read_only=True))
    mounts += [
        Mount(host, f"{ws}/mounts/{name}", read_only=read_only)
        for name, host, read_only in plan.grants
    ]
    if plan.python_root:
        mounts.append(Mount(Path(plan.python_root), plan.python_root, read_only=True))
    return mounts


def link_plain_layout(plan: RunPlan) -> None:
    """Plain runs: ``state`` and ``mounts/<name>`` links inside the run folder."""
    (plan.run_dir / "state").symlink_to(plan.state_dir, target_is_directory=True)
    if plan.grants:
        mounts = plan.run_dir / "mounts"
        mounts.mkdir(mode=0o750)
        for name, host, _ in plan.grants:
            (mounts / name).symlink_to(host, target_is_directory=True)


def limits_report(
    executor: Executor, choice: SandboxChoice, limits: Limits, run_id: str
) -> dict[str, Any]:
    """What will limit the run and how (``envFacts.limits``): the cgroup or rlimits of a
    local run, the container limits of a pod (which has no pids limit)."""
    if choice.mode != "kubernetes":
        spec = LaunchSpec(argv=[], log_path=Path(os.devnull), limits=limits,
                          labels={"runyard.agent-run": run_id})  # fmt: skip
        report = planned_limits(executor, spec)
        if report is not None:
            return report
    memory = None if limits.memory_bytes is None else limits.memory_bytes >> 20
    by = "kubernetes" if choice.mode == "kubernetes" else "none"
    return {"memory_mb": memory, "pids": limits.pids, "cpu": limits.cpu, "enforced_by": by}


def launch_spec(
    plan: RunPlan, choice: SandboxChoice, owner: Ownership, timeout: float,
    shell: str | None = None,
) -> LaunchSpec:  # fmt: skip
    """The final spec: sandbox (or plain), then the run user, then the exit recorder.

    A pod needs only the recorder (in its image's ``shell``, none without one): Kubernetes
    isolates it and runs it as its configured user, and says how it ended while its Job
    exists; the file tells it when the Job is gone before that was read.
    """
    labels = {"runyard.agent-run": plan.run_id, "runyard.session": plan.session_id}
    limits = replace(plan.limits, timeout_seconds=timeout)
    if choice.mode == "kubernetes":
        return LaunchSpec(
            argv=pod_argv(plan.argv, shell), log_path=plan.log_path, cwd=Path(SANDBOX_WORKSPACE),
            env=plan.env, mounts=sandbox_mounts(plan, POD_SOCKET_DIR), labels=labels,
            limits=limits, network=plan.network,
        )  # fmt: skip
    if choice.mode == "bwrap":
        inner = LaunchSpec(
            argv=plan.argv, log_path=plan.log_path, cwd=Path(SANDBOX_WORKSPACE), env=plan.env,
            mounts=sandbox_mounts(plan), labels=labels, limits=limits, network=plan.network,
        )  # fmt: skip
        spec = wrap_spec(choice.bwrap or "bwrap", inner)
    else:
        link_plain_layout(plan)
        spec = LaunchSpec(
            argv=plan.argv, log_path=plan.log_path, cwd=plan.run_dir, env=plan.env,
            labels=labels, limits=limits,
        )  # fmt: skip
    argv = ["/bin/sh", "-c", EXIT_RECORDER, "runyard-run", str(plan.exit_file)]
    return replace(spec, argv=[*argv, *user_prefix(owner), *spec.argv])


def pod_argv(argv: list[str], shell: str | None) -> list[str]:
    """``argv`` under the exit recorder, writing :data:`POD_EXIT_FILE` in the pod's tmp/."""
    if shell is None:
        return argv
    recorded = f"{SANDBOX_WORKSPACE}/tmp/{POD_EXIT_FILE}"
    return [shell, "-c", POD_EXIT_RECORDER, "runyard-run", recorded, *argv]


def pod_exit_file(run_dir: Path) -> Path:
    """Where the server finds what a pod's recorder wrote (a folder the run can write)."""
    return run_dir / "tmp" / POD_EXIT_FILE


def read_pod_exit_file(path: Path) -> int | None:
    """The code in a pod's exit file, or None: the run may have put anything there, so a
    link is not followed, a FIFO does not block, and only a few bytes are read."""
    try:
        fd = os.open(path, NODE_FLAGS)
    except OSError:
        return None
    try:
        return int(os.read(fd, EXIT_FILE_BYTES).decode("ascii").strip())
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
