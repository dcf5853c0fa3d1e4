"""``agent_chat``: one turn of an agent session, as AxonX 0.2.2's job of that name.

A turn is a run of the default agent package (``agent_package``, else the built-in
offline reference agent) in the session ``session_id`` names (a UUID or a runyard id), or
in a new session when none is given (the admin only: a run token cannot make sessions).
``POST /jobs/agent_chat`` waits for the run to end and answers the run's final answer
(``success`` when it succeeded) with ``metadata`` ``{session_id, run_id, state, exit_code,
agent_depth}``; ``session_id`` is in the form it was asked with (a new session: a UUID).

``POST /jobs/agent_chat/events`` streams the turn as AxonX's agent backend does: an
``agent_message`` event ``SessionStart``, the user's message, the run's state changes
(system messages), its output as it is written (one assistant block, appended to line by
line), its final answer, then one ``result`` event with the answer above. A stream that
is dropped leaves the run going (``cancel_agent_turn`` stops it); a reconnect does not
resume a stream, it would ask for another turn.

As AxonX's, a turn at ``agent_depth`` 3 or deeper is refused with ``success: false``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from runyard.agents.models import Run, new_id
from runyard.agents.runs import RunRequest
from runyard.api import job_args as a
from runyard.api.agent_session_view import (
    SESSION_REF_PATTERN,
    SessionRef,
    message_uuid,
    resolve,
)
from runyard.api.agentservice import AgentService
from runyard.api.event_data import result_data
from runyard.api.jobs import JobResult, Scope
from runyard.api.scopes import scrub
from runyard.api.services import Services
from runyard.api.sse import format_event, next_log_window
from runyard.changes import ChangeHub
from runyard.errors import Forbidden, ServiceUnavailable
from runyard.wire import TaskState

MAX_DEPTH = 3  # AxonX's agent_stream max_depth
POLL_SECONDS = 0.5  # a run's log is read again this often while nothing else changes
LOG_WINDOW = 64 * 1024


class AgentChatArgs(a.Strict):
    message: str = Field(min_length=1, description="User message for this Agent turn.")
    session_id: str | None = Field(
        None,
        pattern=SESSION_REF_PATTERN,
        description="Existing session (its UUID or runyard id); omit to create a new Session.",
    )
    agent_depth: int = Field(0, ge=0, description="Internal agent call-chain depth.")


def agent_service(s: Services) -> AgentService:
    if s.agents is None:
        raise ServiceUnavailable("The agent backend is not running on this server")
    return s.agents


@dataclass
class Turn:
    """A started turn: where it runs and how its session is shown."""

    ref: SessionRef
    run_id: str
    depth: int

    @property
    def shown(self) -> str:
        return self.ref.shown()


def start_turn(s: Services, args: AgentChatArgs, scope: Scope) -> Turn:
    """The turn's session (found, or made) and its run, queued or started."""
    service = agent_service(s)
    if args.session_id is None:
        if scope is not None:
            raise Forbidden("A run token may not create sessions; give its own session_id")
        ref = SessionRef(service.catalog.create_session(None).id, True)
    else:
        ref = resolve(service.store, args.session_id, scope)
    run = service.runs.create(RunRequest(ref.id, args.message, run_id=new_id("run")), scope)
    return Turn(ref, run.id, args.agent_depth)


def refused_depth(args: AgentChatArgs) -> JobResult | None:
    if args.agent_depth < MAX_DEPTH:
        return None
    answer = f"Agent call chain is limited to {MAX_DEPTH} nested turns."
    return answer, False, {"agent_depth": args.agent_depth, "session_id": args.session_id}


def turn_result(service: AgentService, turn: Turn, run: Run) -> JobResult:
    """The answer of a turn whose run ended: its folded final answer, else its error."""
    session = service.catalog.session(run.session_id)
    answer = next(
        (t.content for t in session.history if t.run_id == run.id and t.role == "assistant"),
        None,
    )
    if answer is None:
        answer = run.error or f"The run ended {run.state.value} without an answer"
    metadata = {
        "session_id": turn.shown,
        "run_id": run.id,
        "state": run.state.value,
        "exit_code": run.exit_code,
        "agent_depth": turn.depth,
    }
    return answer, run.state == TaskState.SUCCEEDED, metadata


async def _ended(service: AgentService, run_id: str) -> Run:
    with service.changes.subscribe(run_id) as sub:
        while True:
            run = await run_in_threadpool(service.runs.run, run_id)
            if run.state.terminal:
                return run
            await sub.wait(POLL_SECONDS)


async def agent_chat(s: Services, args: AgentChatArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    if (refused := refused_depth(args)) is not None:
        return refused
    turn = await run_in_threadpool(start_turn, s, args, scope)
    service = agent_service(s)
    return await run_in_threadpool(turn_result, service, turn, await _ended(service, turn.run_id))


async def agent_chat_events(s: Services, args: AgentChatArgs, scope: Scope) -> AsyncIterator[bytes]:
    """The turn as AxonX's job events (see the module's text); failures to start it are
    one failed ``result``, as every job's are."""
    if (refused := refused_depth(args)) is not None:
        yield format_event("result", result_data(*refused))
        return
    try:
        turn = await run_in_threadpool(start_turn, s, args, scope)
        stream = _TurnStream(agent_service(s), turn, args.message)
        async for data in stream.events():
            yield format_event(data["kind"], scrub(s, data, scope))
    except Exception as exc:  # before the run, or its session deleted while it ran
        answer = scrub(s, f"{type(exc).__name__}: {exc}", scope)
        yield format_event("result", result_data(answer, False))


class _TurnStream:
    def __init__(self, service: AgentService, turn: Turn, message: str) -> None:
        self.service, self.turn, self.message = service, turn, message
        self.sequence = 0
        self.log_offset = 0
        self.log_open = False
        self.state: TaskState | None = None

    def _message(self, type_name: str, role: str, uuid: str, patches: list[Any]) -> dict[str, Any]:
        data = {
            "kind": "agent_message",
            "session_id": self.turn.shown,
            "type_name": type_name,
            "message_uuid": uuid,
            "role": role,
            "sequence": self.sequence,
            "presentation": patches,
        }
        self.sequence += 1
        return data

    def _block(self, block_id: str, block_type: str, text: str) -> list[dict[str, Any]]:
        start = {"operation": "start", "block_id": block_id, "block_type": block_type}
        return [{**start, "delta": text}, {**start, "operation": "finish"}]

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        turn = self.turn
        yield self._message("SessionStart", "system", f"{turn.shown}:init", [])
        prompt_uuid = f"{turn.run_id}:prompt"
        yield self._message(
            "UserMessage",
            "user",
            prompt_uuid,
            self._block(f"{prompt_uuid}:0", "text", self.message),
        )
        with self.service.changes.subscribe(turn.run_id) as sub:
            while True:
                run = await run_in_threadpool(self.service.runs.run, turn.run_id)
                for data in await run_in_threadpool(self._news, run):
                    yield data
                if run.state.terminal:
                    break
                await sub.wait(POLL_SECONDS)
        answer, success, metadata = await run_in_threadpool(turn_result, self.service, turn, run)
        index = await run_in_threadpool(self._answer_index, run)
        uuid = message_uuid(run.session_id, index) if index is not None else f"{run.id}:answer"
        text = answer if isinstance(answer, str) else str(answer)
        yield self._message(
            "AssistantMessage", "assistant", uuid, self._block(f"{uuid}:0", "text", text)
        )
        yield result_data(answer, success, metadata)

    def _news(self, run: Run) -> list[dict[str, Any]]:
        """A state change and the output written since the last look, as messages."""
        out = []
        if run.state != self.state:
            self.state = run.state
            note = f"{run.id}:{run.state.value}"
            text = f"Run {run.id} is {run.state.value}"
            out.append(
                self._message(
                    "SystemMessage", "system", note, self._block(f"{note}:0", "system", text)
                )
            )
        block = f"{run.id}:output"
        log_path = self.service.layout.log_path(run.id)
        final = run.state.terminal
        while chunk := next_log_window(log_path, self.log_offset, LOG_WINDOW, not final):
            self.log_offset = chunk.next_offset
            operation = "append" if self.log_open else "start"
            self.log_open = True
            patch = {
                "operation": operation,
                "block_id": block,
                "block_type": "text",
                "delta": chunk.content,
            }
            out.append(self._message("StreamEvent", "assistant", block, [patch]))
        if final and self.log_open:
            self.log_open = False
            patch = {"operation": "finish", "block_id": block, "block_type": "text"}
            out.append(self._message("StreamEvent", "assistant", block, [patch]))
        return out

    def _answer_index(self, run: Run) -> int | None:
        session = self.service.catalog.session(run.session_id)
        for index, turn in enumerate(session.history):
            if turn.run_id == run.id and turn.role == "assistant":
                return index
        return None
