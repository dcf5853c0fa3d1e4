"""The status bytes the index keeps, compressed with a preset dictionary.

Every indexed status keeps its answer (``TaskStatus.to_json`` as compact JSON) so lists
are written out without building models. Kept as they are, those bytes were two thirds
of the index (about 650 bytes a task). Deflated on their own they shrink little: a status
is short and most of it is the same keys in the same order. With a preset dictionary of
those keys and their usual values (:data:`PRESET`) a status of 630 bytes keeps in about
140, and comes back in a microsecond or two.

The zlib format (not raw deflate) is used on purpose: its Adler-32 check and the
dictionary's id make a damaged or foreign blob fail to unpack instead of unpacking to
other bytes, so a reader can fall back on the task's file.

    >>> blob = pack(b'{"task_id":"base#demo#a","state":"queued"}')
    >>> unpack(blob)
    b'{"task_id":"base#demo#a","state":"queued"}'
    >>> unpack(blob[:-1]) is None
    True
"""

from __future__ import annotations

import zlib
from typing import Final

# The keys of a status in the order the wire model writes them, with their usual values;
# deflate reaches back into it, the most common parts last (nearest, cheapest to name).
# Changing a byte changes every blob: raise RECORDS_FORMAT in records.py with it.
PRESET: Final = (
    b'"submitted_by":{"session_id":"","run_id":""},"limits":{"max_runtime_s":}'
    b'"synced_from":{"server":"http://","run_id":""}'
    b'"error":"Traceback (most recent call last):\\n  File \\"'
    b',"exit_code":1,"exit_code":-15,"pid":null,"started_at":null,"finished_at":null,'
    b'"steps":[],"result":{},"state":"queued","state":"running","state":"failed",'
    b'"state":"cancelled",'
    b'{"task_id":"agent#","task_type":"agent","task_id":"analysis#","task_type":"analysis",'
    b'"task_id":"backtest#","task_type":"backtest","task_id":"etl#","task_type":"etl",'
    b'"task_id":"inference#","task_type":"inference","task_id":"predict#",'
    b'"task_type":"predict","task_id":"train#","task_type":"train",'
    b'{"task_id":"base#","run_id":"","task_type":"base","task_name":"","state":"succeeded",'
    b'"config":{"task_name":"","source_tasks":""},"created_at":"2026-01-01T00:00:00.000000Z",'
    b'"started_at":"2026-01-01T00:00:00.000000Z","finished_at":"2026-01-01T00:00:00.000000Z",'
    b'"pid":null,"exit_code":0,"error":"","result":{},"steps":[{"name":"",'
    b'"started_at":"2026-01-01T00:00:00.000000Z","finished_at":"2026-01-01T00:00:00.000000Z",'
    b'"percentage":100.0}],"log_path":"/'
)
_LEVEL: Final = 6
_WBITS: Final = 15  # the zlib format: a header naming the dictionary and a checksum
_decompressobj = zlib.decompressobj


def pack(data: bytes) -> bytes:
    """``data`` deflated against :data:`PRESET` (the same bytes for the same data)."""
    deflater = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, zdict=PRESET)
    return deflater.compress(data) + deflater.flush()


def unpack(blob: bytes) -> bytes | None:
    """The bytes :func:`pack` was given; None when ``blob`` is not one whole, intact
    zlib stream (damaged, cut short, or followed by other bytes)."""
    inflater = _decompressobj(_WBITS, PRESET)
    try:
        data = inflater.decompress(blob)
    except zlib.error:
        return None
    return data if inflater.eof and not inflater.unused_data else None


RECENT_ITEMS: Final = 2048  # about 2 MB of usual answers: pages looked at again and again
# a status unpacked larger than this is not kept: a blob of a few KB may unpack to 32 MB
# (a record's limit), so the count alone would not bound the memory (at most 16 MB here)
RECENT_ITEM_BYTES: Final = 8192
_recent: dict[bytes, bytes] = {}


def unpack_recent(blob: bytes) -> bytes | None:
    """:func:`unpack`, answered from the last :data:`RECENT_ITEMS` blobs it unpacked (the
    first pages of a list are read again and again; a blob always unpacks to the same
    bytes, so nothing kept here is ever out of date). For reads of one item or a page; a
    pass over every status uses :func:`unpack` and leaves these alone."""
    data = _recent.get(blob)
    if data is None:
        data = unpack(blob)
        if data is None or len(data) > RECENT_ITEM_BYTES:
            return data
        if len(_recent) >= RECENT_ITEMS:
            _recent.clear()  # whole: safe while other threads look things up
        _recent[blob] = data
    return data
