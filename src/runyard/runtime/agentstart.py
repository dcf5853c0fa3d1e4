"""Starting one queued run, in the order the contract gives.

1. the run's workspace ``workspaces/<run-id>/{in,out,tmp}``;
2. its artifacts placed into ``in/`` (reflink, hard link when read-only inside, else copy);
3. the session's state folder, created on its first run and recorded;
4. ``in/run-context.json`` (the history as it stands before this run);
5. the user prompt appended to the session history, the token's hash kept;
6. the launch through the executor, then state ``running``.

The caller has already refused closed sessions and folded earlier runs' answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.agents.catalog import check_still_granted
from runyard.agents.context import PlacedInput, RunView, SandboxChoice, env_facts, run_context
from runyard.agents.errors import AgentConflict, AgentInvalid, AgentNotFound
from runyard.agents.layout import AgentLayout, Ownership
from runyard.agents.models import (
    Artifact,
    HistoryEntry,
    MountGrant,
    Run,
    Session,
    SessionState,
    hash_token,
    new_run_token,
)
from runyard.agents.packages import AgentPackage, package_for_run, python_root, run_python
from runyard.agents.placement import place_input
from runyard.agents.store import AgentStore
from runyard.config import Settings
from runyard.executors.base import Executor
from runyard.executors.containment import to_limits
from runyard.runtime.agentlaunch import (
    RunPlan,
    job_api_url,
    launch_spec,
    limits_report,
    run_env,
    view_for,
)
from runyard.runtime.agentruns import AgentRuns
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.records import utcnow

CONTEXT_FILE = "run-context.json"


@dataclass
class StartContext:
    settings: Settings
    layout: AgentLayout
    store: AgentStore
    owner: Ownership
    executor: Executor
    runs: AgentRuns
    socket_path: Path
    sandbox: Callable[[], SandboxChoice]


class RunStarter:
    def __init__(self, ctx: StartContext) -> None:
        self.ctx = ctx
        self.api_url = job_api_url(ctx.settings)  # ConfigError now, not at the first run

    def start(self, run: Run, session: Session) -> Run:
        ctx = self.ctx
        choice = ctx.sandbox()
        if choice.required and choice.mode != "bwrap":
            raise AgentInvalid(f"agent_sandbox is 'bwrap' but {choice.reason}")
        package = package_for_run(ctx.settings, run.package)
        artifacts = [self._artifact(run, artifact_id) for artifact_id in run.artifact_ids]
        grants = [self._grant(run, grant_id) for grant_id in run.mount_grant_ids]
        run_dir = ctx.layout.create_run_dirs(run.id, ctx.owner)
        sandboxed = choice.mode == "bwrap"
        placed = [self._place(run_dir, artifact, sandboxed) for artifact in artifacts]
        state_dir = self._session_state(session.id, run.id)
        view = view_for(choice, run_dir, package.path, ctx.socket_path, self.api_url)
        python = run_python(ctx.settings)
        limits = to_limits(ctx.settings.agent_limits)
        report = limits_report(ctx.executor, choice, limits, run.id)
        facts = env_facts(view, choice, ctx.owner, ctx.settings.agent_network, python, report)
        self._write_context(run, session, package, view, facts, placed, grants)
        token = new_run_token()
        prompt = HistoryEntry("user", run.user_prompt, run.id, utcnow())
        ctx.store.prepare_run(
            run.id, token_hash=hash_token(token), isolation=view.isolation, prompt=prompt
        )
        plan = self._plan(run, run_dir, state_dir, package, view, python, token, placed, grants)
        plan.limits = limits
        return self._launch(run, plan, choice)

    def _artifact(self, run: Run, artifact_id: str) -> Artifact:
        artifact = self.ctx.store.get_artifact(artifact_id)
        if artifact is None:
            raise AgentNotFound("artifact", artifact_id)
        return artifact

    def _grant(self, run: Run, grant_id: str) -> tuple[MountGrant, Path]:
        grant = self.ctx.store.get_grant(grant_id)
        if grant is None:
            raise AgentNotFound("mount grant", grant_id)
        if grant.revoked:
            raise AgentConflict(f"Mount grant {grant_id} was revoked")
        return grant, check_still_granted(grant.host_path, self.ctx.settings.allowed_mount_roots)

    def _place(self, run_dir: Path, artifact: Artifact, sandboxed: bool) -> PlacedInput:
        relative = artifact.relative_path or artifact.stored_name
        target = run_dir / "in" / relative
        if target.exists() or target.is_symlink():
            raise AgentConflict(f"Two inputs of this run would both be placed at in/{relative}")
        source = self.ctx.layout.upload_path(artifact.stored_name)
        how = place_input(
            source, target, read_only_inside=sandboxed, owner=self.ctx.owner, root=run_dir / "in"
        )
        return PlacedInput(artifact, relative, how)

    def _session_state(self, session_id: str, run_id: str) -> Path:
        ctx = self.ctx
        state_dir = ctx.layout.ensure_state_dirs(session_id, ctx.owner)
        now = utcnow()
        ctx.store.ensure_session_state(SessionState(session_id, str(state_dir), now, now))
        ctx.store.touch_session_state(session_id, run_id, now)
        return state_dir

    def _write_context(
        self,
        run: Run,
        session: Session,
        package: AgentPackage,
        view: RunView,
        facts: dict[str, Any],
        placed: list[PlacedInput],
        grants: list[tuple[MountGrant, Path]],
    ) -> None:
        ctx = self.ctx
        context = run_context(
            run,
            history=session.history,
            latest_run_id=session.latest_run_id,
            package=package.describe(view.package_dir),
            view=view,
            facts=facts,
            inputs=placed,
            grants=[grant for grant, _ in grants],
            limits={
                "finalAnswerBytes": ctx.settings.agent_max_final_answer_bytes,
                "timeoutSeconds": ctx.settings.agent_run_timeout_seconds,
            },
            forked_from=session.forked_from,
        )
        path = ctx.layout.run_subdir(run.id, "in") / CONTEXT_FILE
        write_json_atomic(path, context, sync_dir=True)
        ctx.owner.apply(path, 0o640)

    def _plan(
        self,
        run: Run,
        run_dir: Path,
        state_dir: Path,
        package: AgentPackage,
        view: RunView,
        python: str,
        token: str,
        placed: list[PlacedInput],
        grants: list[tuple[MountGrant, Path]],
    ) -> RunPlan:
        ctx = self.ctx
        extra = {"RUNYARD_API_TOKEN": token, "RUNYARD_RUN_ID": run.id}
        extra["RUNYARD_SESSION_ID"] = run.session_id
        return RunPlan(
            run_id=run.id,
            session_id=run.session_id,
            run_dir=run_dir,
            state_dir=state_dir,
            package_dir=package.path,
            socket_path=None if view.api_url else ctx.socket_path,
            log_path=ctx.layout.log_path(run.id),
            exit_file=ctx.layout.exit_file(run.id),
            argv=package.argv(view.package_dir, python),
            env=run_env(ctx.settings, view, extra),
            read_only_inputs=[p.relative for p in placed if p.placement == "hardlink"],
            grants=[(g.name, path, g.access.value == "ro") for g, path in grants],
            python_root=python_root(python) if view.isolation == "bwrap" else None,
            network=ctx.settings.agent_network,
        )

    def _launch(self, run: Run, plan: RunPlan, choice: SandboxChoice) -> Run:
        ctx = self.ctx
        timeout = ctx.settings.agent_run_timeout_seconds
        shell = ctx.settings.kubernetes.stdin_shell if ctx.settings.kubernetes else None
        spec = launch_spec(plan, choice, ctx.owner, timeout, shell)
        writable = (plan.run_dir / "out", plan.run_dir / "tmp", plan.state_dir)
        watched = ctx.runs.launch(
            run.id, run.session_id, spec, plan.exit_file, timeout, folders=writable
        )
        started = ctx.store.mark_running(run.id, started_at=utcnow(), handle=watched.record())
        ctx.runs.watch(watched)  # only now: its end is settled after it is seen running
        return started
