"""Run tokens: a bearer secret scoped to one run (and so to one session).

Only the SHA-256 of a token is stored. A token opens ``/jobs`` and ``/api/v1`` while its
run is queued or running; the agent routes then narrow it to the run's own session.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

TOKEN_PREFIX = "ryr_"


@dataclass(frozen=True)
class RunScope:
    """What a request authenticated by a run token may touch."""

    run_id: str
    session_id: str

    def allows_session(self, session_id: str) -> bool:
        return session_id == self.session_id


def new_run_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def looks_like_run_token(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX) and 20 < len(token) < 200
