"""The Studio's sign-in: one-time login codes, traded for a browser session token.

``serve`` and ``runyard studio`` print ``http://HOST:PORT/#login=<code>``; the Studio trades
the code once (``POST /api/v1/login``, :mod:`runyard.api.routes_login`) for a *browser
session token* and keeps that in the tab's ``sessionStorage``. The server (admin) token
never reaches the browser:

* browsers keep every address they open (history, session restore, favicons): what they
  keep of a login link is a code that was spent at once and would expire within minutes;
* browsers write ``sessionStorage`` to the profile's disk too (Chromium's ``Session
  Storage`` folder, for session restore): what lands there is a session token that ends
  with the server process, after ``studio_session_hours``, or at the Studio's "Forget
  token" — not the token that opens the server for as long as it keeps it.

A session token opens what the server token opens (it is the admin's, signed in).

Both kinds of secret follow the same rules: random (``secrets``; 192 bits for a code, 256
for a session), kept in this process's memory only, as their SHA-256 (the secret itself is
never stored), compared in constant time against every one held; at most ``capacity`` are
held, the oldest giving way. Only the admin mints codes (the banner, and the admin-only
route ``runyard studio`` calls), and only a valid code opens a session, so no request can
grow either store.

>>> codes = LoginCodes(ttl_seconds=300)
>>> code = codes.issue()
>>> codes.redeem(code), codes.redeem(code)
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_SECRET_LENGTH = 128  # what is read of a presented secret; longer is no secret of ours
CODE_TTL_SECONDS = 300.0
SESSION_TTL_SECONDS = 12 * 3600.0


@dataclass(frozen=True)
class _Held:
    digest: bytes
    expires_at: float


class _Secrets:
    """Secrets issued here and not yet expired, spent or ended (thread-safe)."""

    size = 32  # bytes of randomness in each secret

    def __init__(
        self, ttl_seconds: float, capacity: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if ttl_seconds <= 0 or capacity < 1:
            raise ValueError("a secret needs a positive lifetime and room for one")
        self.ttl_seconds = ttl_seconds
        self.capacity = capacity
        self._clock = clock
        self._held: list[_Held] = []  # oldest first
        self._lock = threading.Lock()

    def issue(self) -> str:
        """A new secret, valid for ``ttl_seconds``."""
        secret = secrets.token_urlsafe(self.size)
        with self._lock:
            now = self._clock()
            self._held = [held for held in self._held if held.expires_at > now]
            del self._held[: max(0, len(self._held) - self.capacity + 1)]
            self._held.append(_Held(_digest(secret), now + self.ttl_seconds))
        return secret

    def _find(self, secret: str, *, remove: bool) -> bool:
        if not secret or len(secret) > MAX_SECRET_LENGTH:
            return False
        presented = _digest(secret)
        with self._lock:
            now = self._clock()
            found = None
            for held in self._held:  # every entry compared: the time says nothing of which
                if hmac.compare_digest(held.digest, presented):
                    found = held
            spent = found if remove else None
            self._held = [h for h in self._held if h.expires_at > now and h is not spent]
        return found is not None and found.expires_at > now

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


class LoginCodes(_Secrets):
    """The codes of login links: each opens one browser session, once, for a few minutes."""

    size = 24  # 192 bits, 32 URL-safe characters

    def __init__(
        self,
        ttl_seconds: float = CODE_TTL_SECONDS,
        capacity: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(ttl_seconds, capacity, clock)

    def redeem(self, code: str) -> bool:
        """True once for a code issued here and not expired; the code is spent either way."""
        return self._find(code, remove=True)


class BrowserSessions(_Secrets):
    """The tokens of signed-in Studio tabs: the admin's, for ``ttl_seconds`` at most."""

    def __init__(
        self,
        ttl_seconds: float = SESSION_TTL_SECONDS,
        capacity: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(ttl_seconds, capacity, clock)

    def valid(self, token: str) -> bool:
        return self._find(token, remove=False)

    def end(self, token: str) -> bool:
        """End the session of ``token``; False if there was none."""
        return self._find(token, remove=True)


def lifetime_words(seconds: float) -> str:
    """``for 5 minutes``, ``for 90 seconds``: how long a code holds, for people."""
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"for {minutes} minute{'s' if minutes != 1 else ''}"
    return f"for {seconds:g} second{'' if seconds == 1 else 's'}"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()
