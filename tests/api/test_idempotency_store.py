"""The Idempotency-Key store: keys expire after 24 h, and a submit's cost does not grow
with the keys of the last 24 h (a million submits a day must not mean a million-row scan
per submit)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runyard.api.idempotency import STORE_DIR, TTL_SECONDS, IdempotencyStore
from runyard.errors import IdempotencyConflict

ROUTE = "POST /jobs/submit\nadmin"
FRESH_KEYS = 100_000


def _db_file(root: Path) -> Path:
    return root / STORE_DIR / "keys.sqlite"


def test_a_key_answers_again_until_it_expires(tmp_path: Path) -> None:
    store = IdempotencyStore(tmp_path)
    try:
        assert store.reserve(ROUTE, "k", "digest-a") is None
        store.answer(ROUTE, "k", 200, {"task_id": "base#demo#x"})
        again = store.reserve(ROUTE, "k", "digest-a")
        assert again is not None and again.body == {"task_id": "base#demo#x"}
        with pytest.raises(IdempotencyConflict):
            store.reserve(ROUTE, "k", "digest-b")

        with sqlite3.connect(_db_file(tmp_path)) as other:  # the key is a day and a second old
            other.execute("UPDATE keys SET created = ?", (time.time() - TTL_SECONDS - 1,))

        assert store.reserve(ROUTE, "k", "digest-b") is None  # forgotten: a new request
    finally:
        store.close()


def test_a_reserve_reads_the_expired_keys_not_every_key(tmp_path: Path) -> None:
    store = IdempotencyStore(tmp_path)
    try:
        now = time.time()
        with sqlite3.connect(_db_file(tmp_path)) as other:
            other.executemany(
                "INSERT INTO keys VALUES (?, ?, 'h', 200, '{}', ?)",
                ((ROUTE, f"key-{i}", now - i * 0.5) for i in range(FRESH_KEYS)),
            )
            other.execute(  # three expired keys among them
                "UPDATE keys SET created = ? WHERE key IN ('key-1', 'key-2', 'key-3')",
                (now - TTL_SECONDS - 60,),
            )
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        store._db.set_progress_handler(count, 100)  # once every 100 SQLite VM steps
        assert store.reserve(ROUTE, "new", "digest") is None
        store.answer(ROUTE, "new", 200, {})
        store._db.set_progress_handler(None, 100)

        # a scan of 100,000 rows takes hundreds of thousands of steps; an index read, tens
        assert steps * 100 < 5_000, steps
        with sqlite3.connect(_db_file(tmp_path)) as other:
            left = other.execute("SELECT count(*) FROM keys").fetchone()[0]
            gone = other.execute("SELECT count(*) FROM keys WHERE key IN ('key-1', 'key-2')")
            assert left == FRESH_KEYS - 3 + 1 and gone.fetchone()[0] == 0
    finally:
        store.close()


def test_an_answer_outlives_the_process_that_kept_it(tmp_path: Path) -> None:
    """An answer is not synced to disk (what it answers for is, and a reserved key finds
    it again), but it is committed: a server killed right after keeping it answers the
    retry from the store, not by running the request again."""
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from runyard.api.idempotency import IdempotencyStore\n"
        "store = IdempotencyStore(Path(sys.argv[1]))\n"
        f"assert store.reserve({ROUTE!r}, 'k', 'digest') is None\n"
        f"store.answer({ROUTE!r}, 'k', 200, {{'task_id': 'base#demo#x'}})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=60)
    assert done.returncode == -signal.SIGKILL
    store = IdempotencyStore(tmp_path)
    try:
        kept = store.reserve(ROUTE, "k", "digest")
        assert kept is not None and (kept.status, kept.body) == (200, {"task_id": "base#demo#x"})
        store.answer(ROUTE, "k", 200, {"task_id": "base#demo#x"})  # and it can answer again
        again = store.reserve(ROUTE, "k", "digest")
        assert again is not None and again.status == 200
    finally:
        store.close()
