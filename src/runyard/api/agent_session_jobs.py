"""AxonX 0.2.2's agent session jobs over runyard's agent backend.

``list_agent_sessions``, ``get_agent_session``, ``rename_agent_session``,
``tag_agent_session``, ``delete_agent_session``, ``fork_agent_session``,
``cancel_agent_turn`` here, and ``agent_chat`` (:mod:`runyard.api.agent_chat`). Parameters
are AxonX's (bounds, defaults, no other fields) except that ``session_id`` takes a runyard
session id as well as a UUID (:mod:`runyard.api.agent_session_view`); answers are AxonX's
shapes: a list of ``AgentSessionInfo``, an ``AgentSession`` (info and history blocks), or
``{"session_id"}`` (``AgentMutationResult``) in the form the session was named with.

A run token sees and acts on its own session only (another session, by either id, is not
found); it may not fork (a new session) nor start a session. ``delete_agent_session``
removes the session, its runs, uploads, state and snapshots (:mod:`runyard.agents.removal`)
and is refused while a run of it is queued or running; ``cancel_agent_turn`` cancels the
session's active run.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from runyard.agents.errors import AgentNotFound
from runyard.agents.models import check_title
from runyard.agents.removal import remove_session
from runyard.api import job_args as a
from runyard.api.agent_chat import AgentChatArgs, agent_chat, agent_service
from runyard.api.agent_session_view import (
    SCAN_PAGE,
    SESSION_REF_PATTERN,
    UUID_PATTERN,
    history_blocks,
    resolve,
    run_of_message,
    session_info,
    session_uuid,
)
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import Forbidden
from runyard.workspace.records import utcnow

SessionId = Annotated[
    str, Field(pattern=SESSION_REF_PATTERN, description="The session's UUID or runyard id.")
]


class ListSessionsArgs(a.Strict):
    limit: int | None = Field(None, ge=1, le=200, description="At most this many sessions.")
    offset: int = Field(0, ge=0, description="Sessions to skip, newest first.")


class GetSessionArgs(a.Strict):
    session_id: SessionId
    limit: int | None = Field(None, ge=1, le=1000, description="At most this many messages.")
    offset: int = Field(0, ge=0, description="Messages to skip, oldest first.")


class RenameArgs(a.Strict):
    session_id: SessionId
    title: str = Field(min_length=1, description="The session's new title.")


class TagArgs(a.Strict):
    session_id: SessionId
    tag: str | None = Field(description="The tag; null clears it.")


class SessionArgs(a.Strict):
    session_id: SessionId


class ForkArgs(a.Strict):
    session_id: SessionId
    up_to_message_id: str | None = Field(
        None,
        pattern=UUID_PATTERN,
        description="A message UUID of a run's turn: fork at that run's checkpoint.",
    )
    title: str | None = Field(None, min_length=1, description="The fork's title.")


def _list(s: Services, args: ListSessionsArgs, scope: Scope) -> list[dict[str, Any]]:
    service = agent_service(s)
    if scope is not None:
        sessions = [] if args.offset else [service.catalog.session(scope.session_id, scope)]
        return [session_info(x, session_uuid(x.id)) for x in sessions[: args.limit]]
    wanted = None if args.limit is None else args.offset + args.limit
    found: list[Any] = []
    cursor: str | None = None
    while wanted is None or len(found) < wanted:
        page = service.store.list_sessions(SCAN_PAGE, cursor)
        found.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    chosen = found[args.offset : wanted]
    return [session_info(x, session_uuid(x.id)) for x in chosen]


def _get(s: Services, args: GetSessionArgs, scope: Scope) -> dict[str, Any]:
    service = agent_service(s)
    ref = resolve(service.store, args.session_id, scope)
    session = service.catalog.session(ref.id, scope)
    blocks = history_blocks(session, args.offset, args.limit)
    return {"info": session_info(session, ref.shown()), "blocks": blocks}


def _rename(s: Services, args: RenameArgs, scope: Scope) -> dict[str, Any]:
    service = agent_service(s)
    ref = resolve(service.store, args.session_id, scope)
    service.catalog.session(ref.id, scope)
    service.store.set_session_labels(ref.id, utcnow(), title=check_title(args.title))
    return {"session_id": ref.shown()}


def _tag(s: Services, args: TagArgs, scope: Scope) -> dict[str, Any]:
    service = agent_service(s)
    ref = resolve(service.store, args.session_id, scope)
    service.catalog.session(ref.id, scope)
    tag = None if args.tag is None else check_title(args.tag, "tag") or None
    service.store.set_session_labels(ref.id, utcnow(), tag=tag, set_tag=True)
    return {"session_id": ref.shown()}


def _delete(s: Services, args: SessionArgs, scope: Scope) -> dict[str, Any]:
    service = agent_service(s)
    ref = resolve(service.store, args.session_id, scope)
    service.catalog.session(ref.id, scope)
    snapshots = service.checkpoints.snapshots
    remove_session(service.runs, service.store, service.layout, snapshots, ref.id)
    return {"session_id": ref.shown()}


def _fork(s: Services, args: ForkArgs, scope: Scope) -> dict[str, Any]:
    if scope is not None:
        raise Forbidden("A run token may not fork sessions (a fork is a new session)")
    service = agent_service(s)
    ref = resolve(service.store, args.session_id, scope)
    session = service.catalog.session(ref.id)
    if args.up_to_message_id is not None:
        run_id = run_of_message(session, args.up_to_message_id)
    else:
        newest = service.store.list_checkpoints(ref.id, 1).items
        if not newest:
            raise AgentNotFound(
                "checkpoint (no run of it left a state snapshot) in session", ref.id
            )
        run_id = newest[0].id
    fork = service.checkpoints.fork(ref.id, run_id, args.title, None)
    return {"session_id": ref.shown(fork.id)}


def _cancel(s: Services, args: SessionArgs, scope: Scope) -> dict[str, Any]:
    service = agent_service(s)
    ref = resolve(service.store, args.session_id, scope)
    service.catalog.session(ref.id, scope)
    active = [run for run in service.store.active_runs() if run.session_id == ref.id]
    if not active:
        raise AgentNotFound("running turn in agent session", args.session_id)
    for run in active:
        service.runs.cancel(run.id, scope)
    return {"session_id": ref.shown()}


def _threaded(work: Any) -> Any:
    async def handler(s: Services, args: Any, hub: ChangeHub, scope: Scope) -> JobResult:
        return await run_in_threadpool(work, s, args, scope), True

    return handler


Mutation = dict[str, str]
AGENT_SESSION_JOBS = (
    Job(
        "agent_chat",
        "Run one interactive Agent session turn over the workspace.",
        AgentChatArgs,
        Any,
        agent_chat,
    ),
    Job(
        "list_agent_sessions",
        "List Agent Sessions for this workspace, newest first.",
        ListSessionsArgs,
        list[dict[str, Any]],
        _threaded(_list),
    ),
    Job(
        "get_agent_session",
        "Return one Agent Session and its visible message history.",
        GetSessionArgs,
        dict[str, Any],
        _threaded(_get),
    ),
    Job(
        "rename_agent_session",
        "Set the custom title of an Agent Session.",
        RenameArgs,
        Mutation,
        _threaded(_rename),
    ),
    Job(
        "tag_agent_session",
        "Set or clear an Agent Session tag.",
        TagArgs,
        Mutation,
        _threaded(_tag),
    ),
    Job(
        "delete_agent_session",
        "Permanently delete an Agent Session, its runs, uploads and state.",
        SessionArgs,
        Mutation,
        _threaded(_delete),
    ),
    Job(
        "fork_agent_session",
        "Fork an Agent Session at a run's checkpoint, optionally at one message UUID.",
        ForkArgs,
        Mutation,
        _threaded(_fork),
    ),
    Job(
        "cancel_agent_turn",
        "Interrupt the running turn in an Agent Session.",
        SessionArgs,
        Mutation,
        _threaded(_cancel),
    ),
)
