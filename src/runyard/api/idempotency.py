"""``Idempotency-Key`` for creating requests (``POST /jobs/submit``, ``POST /api/v1/runs``).

The same key with the same body answers the first answer again, without a second run; the
same key with another body is refused (:class:`IdempotencyConflict`, HTTP 409). Keys are
kept 24 h in ``<workspace>/.idempotency/keys.sqlite``, so they survive restarts.

A key is reserved (a row without an answer) before the work starts and answered after.
Two requests with one key in one server are serialised by a per-key lock (one server per
workspace: :mod:`runyard.api.serverlock`). A reserved row without an answer after a
restart means the server died mid-request: a submit then finds the task its first attempt
made by the key's mark, an empty file named by the key's hash made in the task folder
before it appeared (:func:`runyard.runtime.creation.key_mark`), so it still never runs
twice.
Failures that created nothing (5xx, 507) release the key, so the retry runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.errors import BadIdempotencyKey, IdempotencyConflict
from runyard.workspace.space import is_space_error, storage_error

HEADER = "idempotency-key"
TTL_SECONDS = 24 * 3600
MAX_KEY_LENGTH = 255
STORE_DIR = ".idempotency"
# the key of the request being handled, for a handler that records it with what it makes
current_key: ContextVar[str | None] = ContextVar("runyard_idempotency_key", default=None)


PENDING = "pendingId"


def _pending_id(row: Any) -> str | None:
    if row is None or row[0] is not None or row[1] is None:
        return None
    body = json.loads(row[1])
    return body.get(PENDING) if isinstance(body, dict) else None


def split_marker(marker: str) -> tuple[str, str]:
    """``(route, key)`` of a marker made by :func:`runyard.api.idempotent.marker`."""
    route, _, key = marker.partition("\n")
    return route, key


@dataclass(frozen=True)
class Stored:
    """What a key holds: the answer (None while the first request is still in flight)."""

    status: int | None
    body: Any


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
        raise BadIdempotencyKey(
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters"
        )
    return key


def body_hash(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@contextlib.contextmanager
def _space_checked() -> Iterator[None]:
    """A full disk (SQLite's "database or disk is full", ENOSPC) is the 507 of
    :class:`InsufficientStorage`, not a server error."""
    try:
        yield
    except (sqlite3.OperationalError, OSError) as exc:
        if is_space_error(exc):
            raise storage_error(exc, "keep the request's Idempotency-Key") from exc
        raise


class IdempotencyStore:
    """Keys per ``route`` (which also names the caller), in SQLite under the workspace.

    On a full disk each writing call raises :class:`InsufficientStorage`.
    """

    def __init__(self, workspace_root: Path) -> None:
        folder = workspace_root / STORE_DIR
        with _space_checked():
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._db = sqlite3.connect(folder / "keys.sqlite", check_same_thread=False)
        try:
            with _space_checked():
                self._setup()
        except BaseException:
            self._db.close()
            raise
        self._lock = threading.Lock()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def _setup(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # each commit durable, unless relaxed
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS keys (route TEXT, key TEXT, hash TEXT, status INTEGER,"
            " body TEXT, created REAL, PRIMARY KEY (route, key))"
        )
        # the purge of expired keys on each reserve reads only them (a whole-table scan
        # without it: 70 ms a submit with a million keys of the last 24 h)
        self._db.execute("CREATE INDEX IF NOT EXISTS keys_created ON keys (created)")
        self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.asynccontextmanager
    async def held(self, route: str, key: str) -> AsyncIterator[None]:
        """Serialise the requests of one key in this server."""
        lock = self._locks.setdefault((route, key), asyncio.Lock())
        async with lock:
            yield
        if not lock.locked():
            self._locks.pop((route, key), None)

    def reserve(self, route: str, key: str, digest: str) -> Stored | None:
        """None when the key is new (now reserved); else what it holds. 409 on another body."""
        now = time.time()
        with _space_checked(), self._lock, self._db:
            self._db.execute("DELETE FROM keys WHERE created < ?", (now - TTL_SECONDS,))
            row = self._db.execute(
                "SELECT hash, status, body FROM keys WHERE route = ? AND key = ?", (route, key)
            ).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO keys VALUES (?, ?, ?, NULL, NULL, ?)", (route, key, digest, now)
                )
                return None
        if row[0] != digest:
            raise IdempotencyConflict(
                "This Idempotency-Key was already used with a different request body; "
                "use a new key for a new request"
            )
        return Stored(row[1], json.loads(row[2]) if row[2] is not None else None)

    def answer(self, route: str, key: str, status: int, body: Any) -> None:
        """Keep the answer for the key: committed, so it outlives the process, but not
        synced to disk (one fsync less a request). An answer lost to a power cut leaves the
        key reserved, and its retry finds what the first request made (the ``recover`` of
        :func:`runyard.api.idempotent.run_once`): a task by the key's mark, made durable
        with its folder (:func:`runyard.runtime.creation.key_mark`), a run by the id synced
        with the reservation (:meth:`reserve_id`)."""
        with _space_checked(), self._lock:
            self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                with self._db:
                    self._db.execute(
                        "UPDATE keys SET status = ?, body = ? WHERE route = ? AND key = ?",
                        (status, json.dumps(body), route, key),
                    )
            finally:
                self._db.execute("PRAGMA synchronous=FULL")

    def reserve_id(self, route: str, key: str, make_id: Any) -> str:
        """The id of what this key's request creates, chosen once and kept with the key
        before anything is made, so a retry after a crash finds it (or makes it under that
        same id)."""
        with _space_checked(), self._lock, self._db:
            row = self._db.execute(
                "SELECT status, body FROM keys WHERE route = ? AND key = ?", (route, key)
            ).fetchone()
            pending = _pending_id(row)
            if pending is not None:
                return pending
            chosen = str(make_id())
            self._db.execute(
                "UPDATE keys SET body = ? WHERE route = ? AND key = ? AND status IS NULL",
                (json.dumps({PENDING: chosen}), route, key),
            )
            return chosen

    def pending_id(self, route: str, key: str) -> str | None:
        """The id reserved by :meth:`reserve_id` for a request that was never answered."""
        with self._lock:
            row = self._db.execute(
                "SELECT status, body FROM keys WHERE route = ? AND key = ?", (route, key)
            ).fetchone()
        return _pending_id(row)

    def release(self, route: str, key: str) -> None:
        """Forget a key whose request created nothing, so that its retry runs."""
        with _space_checked(), self._lock, self._db:
            self._db.execute("DELETE FROM keys WHERE route = ? AND key = ?", (route, key))
