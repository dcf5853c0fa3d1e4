"""Errors of the agent-run backend. Each carries the HTTP status and code it answers with::

AgentError (runyard.errors)
├── AgentNotFound          404  not_found        a session, artifact, grant, run or file
│   └── PackageNotFound    404  package_not_found
├── AgentConflict          409  conflict         closed session, active run, duplicate name
│   ├── SessionClosed      409  session_closed
│   └── RunActive          409  run_active
├── AgentForbidden         403  forbidden        a run token outside its own session
├── AgentInvalid           422  invalid          bad names, paths, grants, packages
│   └── BadRequest         400  bad_request      a malformed request (multipart, JSON)
└── UploadTooLarge         413  too_large        an upload over ``upload_max_bytes``
"""

from __future__ import annotations

from runyard.errors import AgentError


class AgentNotFound(AgentError):
    status = 404
    code = "not_found"

    def __init__(self, kind: str, ident: str) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"No {kind} {ident!r}")


class PackageNotFound(AgentNotFound):
    code = "package_not_found"

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__("agent package", name)
        self.available = available
        listed = ", ".join(available) or "none"
        self.args = (f"No agent package {name!r}; available packages: {listed}",)


class AgentConflict(AgentError):
    status = 409
    code = "conflict"


class SessionClosed(AgentConflict):
    code = "session_closed"

    def __init__(self, session_id: str, action: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"Session {session_id} is closed: cannot {action}; reopen it first "
            f"(POST /api/v1/sessions/{session_id}/reopen)"
        )


class RunActive(AgentConflict):
    code = "run_active"

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        super().__init__(
            f"Session {session_id} already has an active run ({run_id}); wait for it, "
            'cancel it, or create the run with "enqueue": true'
        )


class AgentForbidden(AgentError):
    status = 403
    code = "forbidden"


class AgentInvalid(AgentError):
    status = 422
    code = "invalid"


class BadRequest(AgentInvalid):
    status = 400
    code = "bad_request"


class UploadTooLarge(AgentError):
    status = 413
    code = "too_large"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"Upload exceeds the limit of {limit} bytes (upload_max_bytes)")


def http_status(exc: AgentError) -> int:
    return int(getattr(exc, "status", 500))


def error_code(exc: AgentError) -> str:
    return str(getattr(exc, "code", "internal"))
