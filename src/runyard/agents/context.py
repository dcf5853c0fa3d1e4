"""``in/run-context.json``: what a run is told about its session, inputs and environment.

Paths in it are relative to the workspace root (``/workspace`` in the sandbox,
``$RUNYARD_WORKSPACE`` always). ``history`` holds the turns before this run (roles
``user``, ``assistant`` and ``system`` — notes such as a restored state folder); the new
prompt is ``userPrompt``; ``latestRunId`` is the session's run before this one.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from runyard.agents.layout import Ownership
from runyard.agents.models import Artifact, HistoryEntry, MountGrant, Run, to_wire

CONTEXT_VERSION = 1


@dataclass(frozen=True)
class SandboxChoice:
    """``bwrap``, ``kubernetes`` (a pod per run) or ``none``, and why ``none`` when
    bubblewrap was wanted or missing."""

    mode: str
    bwrap: str | None = None
    reason: str = ""
    required: bool = False


@dataclass(frozen=True)
class RunView:
    """Paths as the run sees them, and its way to the Job API: the Unix socket
    ``api_socket``, or (a pod given ``kubernetes.job_api_url``) the TCP address ``api_url``."""

    isolation: str
    workspace: str
    package_dir: str
    api_socket: str
    api_url: str = ""

    def path(self, relative: str) -> str:
        return f"{self.workspace}/{relative}"


@dataclass(frozen=True)
class PlacedInput:
    artifact: Artifact
    relative: str  # under in/
    placement: str  # reflink | hardlink | copy


def input_entry(placed: PlacedInput) -> dict[str, Any]:
    artifact = placed.artifact
    return {
        "id": artifact.id,
        "fileName": artifact.file_name,
        "relativePath": artifact.relative_path,
        "path": f"in/{placed.relative}",
        "size": artifact.size,
        "sha256": artifact.sha256,
        "mediaType": artifact.media_type,
        "placement": placed.placement,
        "readOnly": placed.placement == "hardlink",
    }


def built_in_tools(view: RunView) -> list[dict[str, Any]]:
    """The Job API entry: over the socket (``http+unix``) or, for a run given a URL,
    over TCP (``http``, ``baseUrl`` that URL, ``socket`` null)."""
    tool: dict[str, Any] = {
        "name": "runyard-jobs",
        "description": (
            "The Task Job API of this runyard: POST /jobs/<name> with "
            '{"arguments": {...}} (submit, status, wait_task, read_task_log, ...)'
        ),
        "transport": "http+unix",
        "socket": view.api_socket,
        "socketEnv": "RUNYARD_API_SOCKET",
        "tokenEnv": "RUNYARD_API_TOKEN",
        "baseUrl": "http://runyard",
        "paths": {"jobs": "/jobs", "agentApi": "/api/v1"},
    }
    if view.api_url:
        tool.update(transport="http", socket=None, socketEnv=None, baseUrl=view.api_url,
                    urlEnv="RUNYARD_API_URL")  # fmt: skip
    return [tool]


def env_facts(
    view: RunView,
    choice: SandboxChoice,
    owner: Ownership,
    network: bool,
    python: str,
    limits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the run may rely on about its environment; ``limits`` is what limits it and
    how (``enforced_by``: cgroup2, cgroup1, rlimit, kubernetes or none)."""
    sandboxed = view.isolation in ("bwrap", "kubernetes")
    facts: dict[str, Any] = {
        "isolation": view.isolation,
        "sandboxed": sandboxed,
        "pidNamespace": sandboxed,
        "network": network if sandboxed else True,
        "mountAccessEnforced": sandboxed,
        "hostWritable": "only /workspace" if sandboxed else "anything the run user may write",
        "workspace": view.workspace,
        "packageDir": view.package_dir,
        "stateDir": view.path("state"),
        "apiSocket": view.api_socket or None,
        "apiUrl": view.api_url or None,
        "uid": owner.effective_uid,
        "gid": owner.effective_gid,
        "python": python,
        "platform": f"{platform.system()}-{platform.machine()}",
    }
    if choice.reason:
        facts["sandboxUnavailable"] = choice.reason
    if limits is not None:
        facts["limits"] = limits
    return facts


def run_context(
    run: Run,
    *,
    history: list[HistoryEntry],
    latest_run_id: str | None,
    package: dict[str, str],
    view: RunView,
    facts: dict[str, Any],
    inputs: list[PlacedInput],
    grants: list[MountGrant],
    limits: dict[str, Any],
    forked_from: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The context document; ``forkedFrom`` ({sessionId, runId}) when the session was forked
    from another session's checkpoint, else null."""
    return {
        "version": CONTEXT_VERSION,
        "runId": run.id,
        "sessionId": run.session_id,
        "latestRunId": latest_run_id,
        "forkedFrom": forked_from,
        "history": to_wire(history),
        "package": package,
        "builtInTools": built_in_tools(view),
        "envFacts": facts,
        "inputArtifacts": [input_entry(placed) for placed in inputs],
        "mounts": [
            {"name": g.name, "path": f"mounts/{g.name}", "access": g.access.value} for g in grants
        ],
        "paths": {"in": "in", "out": "out", "tmp": "tmp", "state": "state"},
        "finalAnswer": "out/final-answer.md",
        "limits": limits,
        "systemPrompt": run.system_prompt,
        "userPrompt": run.user_prompt,
    }
