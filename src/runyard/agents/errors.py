"""Errors of the agent-run backend, in the :class:`runyard.errors.RunyardError` family.

They say what went wrong, not how HTTP answers it: :mod:`runyard.api.errormap` holds the
one table from these classes to statuses and codes::

AgentError (runyard.errors)
├── AgentNotFound          a session, artifact, grant, run or file
│   └── PackageNotFound    an agent package that is not installed
├── AgentConflict          closed session, active run, duplicate name
│   ├── SessionClosed
│   └── RunActive
├── AgentForbidden         a run token outside its own session
├── AgentInvalid           bad names, paths, grants, packages
│   ├── InvalidAgentId     an id that is not one path component (``..``, ``a/b``)
│   └── BadRequest         a malformed request (multipart, JSON, Last-Event-ID)
└── UploadTooLarge         an upload over ``upload_max_bytes``
"""

from __future__ import annotations

from runyard.errors import AgentError


class AgentNotFound(AgentError):
    """No such session, artifact, grant, run or file (or none the caller may see)."""

    def __init__(self, kind: str, ident: str) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"No {kind} {ident!r}")


class PackageNotFound(AgentNotFound):
    """An agent package name that is not among the installed ones."""

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__("agent package", name)
        self.available = available
        listed = ", ".join(available) or "none"
        self.args = (f"No agent package {name!r}; available packages: {listed}",)


class AgentConflict(AgentError):
    """The state forbids it now: a closed session, an active run, a name in use."""


class SessionClosed(AgentConflict):
    """A change to a closed session."""

    def __init__(self, session_id: str, action: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"Session {session_id} is closed: cannot {action}; reopen it first "
            f"(POST /api/v1/sessions/{session_id}/reopen)"
        )


class RunActive(AgentConflict):
    """A second run in a session that already has an active one."""

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        super().__init__(
            f"Session {session_id} already has an active run ({run_id}); wait for it, "
            'cancel it, or create the run with "enqueue": true'
        )


class AgentForbidden(AgentError):
    """A run token acting outside its own session."""


class AgentInvalid(AgentError):
    """Bad names, paths, grants or packages; the message says the rule."""


class InvalidAgentId(AgentInvalid):
    """A session, run, artifact or grant id that breaks the id rule (runyard.agents.ids)."""

    def __init__(self, kind: str, ident: object, rule: str) -> None:
        self.kind = kind
        self.ident = ident
        shown = repr(ident) if len(repr(ident)) <= 80 else repr(ident)[:77] + "..."
        super().__init__(f"Invalid {kind} id {shown}: {rule}")


class BadRequest(AgentInvalid):
    """A malformed request: multipart framing, JSON, a Last-Event-ID."""


class UploadTooLarge(AgentError):
    """An upload over ``upload_max_bytes``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"Upload exceeds the limit of {limit} bytes (upload_max_bytes)")
