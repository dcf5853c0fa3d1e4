"""The index's packed status bytes: every status comes back byte for byte, and a damaged
blob never breaks a read (the task's file is read instead)."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_status

from runyard.repository import TaskRepository, keptbytes
from runyard.repository.records import (
    CREATED_AT,
    INSTANT,
    RAW,
    StatusRecord,
    created_at_text,
    instant_text,
    kept_created_at,
    parse_status,
    sort_instant,
    status_json,
    text_matcher,
    wire_bytes,
)
from runyard.workspace import TaskStatus

BIG_RESULT = {f"k{i}": [i, f"värde {i} ✓", {"x": i * 0.5, "n": None}] for i in range(20_000)}


def odd_status(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "task_id": "base#demo#odd",
        "run_id": "r1",
        "task_type": "base",
        "task_name": "demo",
        "state": "failed",
        "created_at": "2026-01-01T00:00:00.000123Z",
    }
    return {**base, **changes}


ODD_STATUSES = {
    "missing optional fields": odd_status(),
    "unicode": odd_status(
        error='échec "quoted" \\ \n\t\u0001 世界 🙂',
        config={"task_name": "naïve", "source_tasks": "", "emoji": "🙂" * 50},
    ),
    "large result": odd_status(state="succeeded", result=BIG_RESULT),
    "extra fields": odd_status(
        custom={"kept": ["é", None, 1.5e300]},
        submitted_by={"session_id": "s1", "run_id": "x"},
        limits={"max_runtime_s": 5},
        steps=[{"name": "a", "percentage": 12.5, "note": "extra"}],
    ),
    "nulls dropped": odd_status(submitted_by=None, limits=None, synced_from=None, pid=None),
    "created_at with an offset": odd_status(created_at="2026-01-01T02:00:00+02:00"),
    "created_at without micro": odd_status(created_at="2026-01-01T00:00:00Z"),
    "created_at not a time": odd_status(created_at="yesterday"),
    "created_at naive": odd_status(created_at="2026-01-01T00:00:00.000001"),
}


@pytest.mark.parametrize("data", ODD_STATUSES.values(), ids=list(ODD_STATUSES))
def test_a_status_comes_back_as_the_answer_of_status(data: dict[str, object]) -> None:
    parsed = parse_status(json.dumps(data, indent=1).encode(), "base#demo#odd")
    assert parsed is not None
    record, status = parsed
    assert status_json(record) == wire_bytes(status)
    assert json.loads(status_json(record) or b"") == status.to_json()
    assert created_at_text(record[INSTANT], record[CREATED_AT]) == data["created_at"]


def test_the_usual_created_at_is_kept_as_its_instant_only() -> None:
    parsed = parse_status(json.dumps(odd_status()).encode(), "base#demo#odd")
    assert parsed is not None
    assert parsed[0][CREATED_AT] is None
    assert created_at_text(parsed[0][INSTANT], None) == "2026-01-01T00:00:00.000123Z"


def test_a_usual_status_keeps_in_a_quarter_of_its_size() -> None:
    status = TaskStatus.model_validate(
        odd_status(
            config={"task_name": "t0001234", "source_tasks": "", "x": 1234},
            log_path="/var/runyard/logs/base/base#demo#t0001234/r1.log",
            steps=[{"name": "compute", "percentage": 100.0}],
        )
    )
    wire = wire_bytes(status)
    assert len(keptbytes.pack(wire)) * 3 < len(wire)


def damaged_blobs() -> dict[str, bytes]:
    blob = keptbytes.pack(b'{"task_id":"base#demo#a","state":"queued","error":"' + b"x" * 300)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x10
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=keptbytes.PRESET)
    return {
        "flipped byte": bytes(flipped),
        "cut short": blob[:-3],
        "one byte short": blob[:-1],
        "trailing bytes": blob + b"\x00",
        "two blobs": blob + blob,
        "empty": b"",
        "not deflate": b"{}",
        "raw deflate": raw_deflate.compress(b"{}") + raw_deflate.flush(),
    }


@pytest.mark.parametrize("name", list(damaged_blobs()))
def test_a_damaged_blob_does_not_unpack(name: str) -> None:
    assert keptbytes.unpack(damaged_blobs()[name]) is None


@pytest.mark.parametrize("name", list(damaged_blobs()))
def test_a_damaged_blob_does_not_unpack_from_the_recent_ones_either(name: str) -> None:
    blob = damaged_blobs()[name]
    assert keptbytes.unpack_recent(blob) is None
    assert keptbytes.unpack_recent(blob) is None  # nothing was kept for it


def test_the_recent_ones_answer_as_unpack_and_stay_bounded() -> None:
    count = keptbytes.RECENT_ITEMS * 2 + 3
    blobs = [keptbytes.pack(f'{{"task_id":"base#demo#n{i}"}}'.encode()) for i in range(count)]
    for blob in blobs + blobs[-10:] + blobs[:10]:
        assert keptbytes.unpack_recent(blob) == keptbytes.unpack(blob)
        assert len(keptbytes._recent) <= keptbytes.RECENT_ITEMS


def test_a_large_status_is_unpacked_but_not_kept() -> None:
    """A small blob of a large, repetitive status (a task may write one up to a record's
    limit) is answered whole and never held: the recent ones stay a few MB."""
    keptbytes._recent.clear()
    big = b'{"task_id":"base#demo#big","result":"' + b"x" * (4 << 20) + b'"}'
    blob = keptbytes.pack(big)
    assert len(blob) < 16 << 10
    assert keptbytes.unpack_recent(blob) == big
    assert keptbytes.unpack_recent(blob) == big
    assert blob not in keptbytes._recent
    edge = b'"' + b"y" * (keptbytes.RECENT_ITEM_BYTES - 2) + b'"'
    assert keptbytes.unpack_recent(keptbytes.pack(edge)) == edge
    assert keptbytes.pack(edge) in keptbytes._recent


def damage(repo: TaskRepository, task_id: str) -> None:
    """What a damaged blob would look like in memory (nothing in runyard writes one)."""
    with repo._index.lock:
        record = repo._index.statuses[task_id]
        damaged: StatusRecord = (*record[:RAW], record[RAW][:-1], *record[RAW + 1 :])  # type: ignore[assignment]
        repo._index.statuses[task_id] = damaged


def test_a_damaged_blob_is_read_from_its_file_by_the_lists(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    for i in range(5):
        put_status(ws, f"etl#load#n{i}", created=i, error=f"error {i}")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    expected = [status.to_json() for status in repo.list_statuses()[0]]
    damage(repo, "etl#load#n2")
    damage(repo, "etl#load#n4")
    assert [status.to_json() for status in repo.list_statuses()[0]] == expected
    assert status_json(repo._index.statuses["etl#load#n2"]) is not None  # indexed again
    damage(repo, "etl#load#n3")
    peeked = repo.peek("etl#load#n3")
    assert peeked is not None and peeked.error == "error 3"
    damage(repo, "etl#load#n1")
    assert [s.task_id for s in repo.list_statuses(text="error 1")[0]] == []
    assert [s.task_id for s in repo.list_statuses(text="n1")[0]] == ["etl#load#n1"]
    damage(repo, "etl#load#n1")
    ws.status_path("etl#load#n1").unlink()  # damaged and gone: left out, not an error
    assert [s.task_id for s in repo.list_statuses()[0]] == [f"etl#load#n{i}" for i in (4, 3, 2, 0)]


def test_text_search_reads_the_unpacked_bytes(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "etl#load#one", error="Zeitüberschreitung beim Lesen")
    put_status(ws, "etl#load#two", error="")
    repo = TaskRepository(ws)
    repo.start(watch=False)
    found = [s.task_id for s in repo.list_statuses(text="überschreitung")[0]]
    assert found == ["etl#load#one"]
    assert [s.task_id for s in repo.list_statuses(text="LESEN")[0]] == ["etl#load#one"]
    assert [s.task_id for s in repo.list_statuses(text="error")[0]] == []  # a field name
    matches = text_matcher("beim")
    assert matches("etl#load#one", repo._index.statuses["etl#load#one"])


def test_created_at_is_left_out_exactly_when_its_instant_gives_it_back() -> None:
    """The quick test of the usual text agrees with formatting the instant, for usual
    texts and for every near miss (other widths, offsets, dates that do not exist)."""
    rng = random.Random(5)
    texts = [
        instant_text(rng.randrange(-(10**16), 2 * 10**17)) for _ in range(2000)
    ] + [
        "2026-01-01T00:00:00.000123Z", "0999-01-01T00:00:00.000000Z",
        "2026-13-01T00:00:00.000000Z", "2026-02-30T00:00:00.000000Z",
        "2026-01-01T24:00:00.000000Z", "2026-01-01T23:59:60.000000Z",
        "2026-01-01T00:00:00.000000+00:00", "2026-01-01T00:00:00.000000",
        "2026-01-01T00:00:00.123Z", "2026-01-01 00:00:00.000000Z", "+2026-01-01T00:00:00.000000Z",
        "2026-01-01T00:00:00.000000Z\n", "２026-01-01T00:00:00.000000Z", "",
    ]  # fmt: skip
    for text in texts:
        instant = sort_instant(text)
        for given in (instant, instant + 1):
            try:
                expected = None if instant_text(given) == text else text
            except (OverflowError, ValueError):
                expected = text
            assert kept_created_at(given, text) == expected, (text, given)
