"""Tabular previews of a task's Parquet files, computed server-side, read-only.

``GET /api/v1/tasks/{task_id}/preview/{path}?limit=50`` answers
``{"columns": [{"name", "type"}], "rows": [[...]], "total_rows": N, "truncated": {...}}``
for the first ``limit`` rows (1-500) and at most :data:`MAX_COLUMNS` columns. The file is
opened exactly as a download is (``workspace.safefs.open_under``: once, no symlinks, no hard
links, no hidden names) and read only from that descriptor; a run token sees only its own
session's tasks, others answer as missing. pyarrow is optional for runyard: without it the
route answers 501.

A task's files are written by code the server does not trust, so a preview decodes within
:data:`DECODED_BUDGET` bytes, checked before anything is decoded: the footer's length
(the file's last eight bytes), then the size of every row group the first ``limit`` rows
touch, summed, each the larger of what the footer claims and what its page headers say
(:mod:`runyard.api.parquet_pages`); only those row groups are read, one at a time. A file past
the budget answers 413 (:class:`~runyard.errors.PreviewTooLarge`) naming the file, its
decoded size and the budget, whatever its size on disk (27 KB of zstd can hold 768 MiB).

Cells are made JSON-safe: non-finite floats become the strings ``"NaN"``/``"Infinity"``,
dates ISO-8601, bytes a short hex, anything else ``str``; a long cell is cut.
"""

from __future__ import annotations

import datetime
import decimal
import importlib
import math
import os
import struct
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.parquet_pages import chunk_decoded_size
from runyard.api.routes_files import open_task_file
from runyard.api.services import Services
from runyard.errors import InvalidLimit, NotParquet, PreviewTooLarge, PreviewUnavailable
from runyard.workspace.safefs import OpenedFile

DEFAULT_ROWS = 50
MAX_ROWS = 500
MAX_COLUMNS = 200
MAX_CELL_CHARS = 500
MAX_BYTES_CELL = 32
DECODED_BUDGET = 64 * 1024 * 1024  # bytes one preview may decode, footer and rows alike
MAX_PAGES = 100_000  # page headers read to size one preview
TRAILER = struct.Struct("<I4s")  # a Parquet file ends with its footer's length and b"PAR1"


def _parquet() -> Any:
    try:
        return importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise PreviewUnavailable(
            "Parquet previews need pyarrow in the server's environment (pip install pyarrow)"
        ) from exc


def json_cell(value: Any) -> Any:
    """One cell as JSON can carry it (see the module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value if not isinstance(value, str) else value[:MAX_CELL_CHARS]
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value[:MAX_BYTES_CELL].hex() + ("…" if len(value) > MAX_BYTES_CELL else "")
    if isinstance(value, decimal.Decimal):
        return str(value)
    return str(value)[:MAX_CELL_CHARS]


def read_preview(opened: OpenedFile, limit: int) -> dict[str, Any]:
    """The first ``limit`` rows of the Parquet file open on ``opened`` (closed here).

    Raises PreviewTooLarge before decoding when they would pass :data:`DECODED_BUDGET`,
    NotParquet for a file Parquet cannot read."""
    with opened, os.fdopen(os.dup(opened.fd), "rb") as handle:
        parquet = _parquet()
        _check_footer(handle, opened.relative)
        try:
            reader = parquet.ParquetFile(handle)
            groups = groups_to_read(reader.metadata, limit, opened.relative, opened.fd)
            names = reader.schema_arrow.names[:MAX_COLUMNS]
            rows = _read_rows(reader, groups, names, limit)
        except (NotParquet, PreviewTooLarge):
            raise
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise NotParquet(f"{opened.relative} is not a readable Parquet file: {exc}") from exc
        return _answer(reader, names, rows)


def _check_footer(handle: Any, relative: str) -> None:
    """Refuse a footer (the file's metadata, decoded whole by pyarrow) past the budget."""
    size = os.fstat(handle.fileno()).st_size
    if size < 2 * TRAILER.size:
        raise NotParquet(f"{relative} is not a readable Parquet file: {size} bytes long")
    handle.seek(size - TRAILER.size)
    footer, magic = TRAILER.unpack(handle.read(TRAILER.size))
    if magic != b"PAR1":
        raise NotParquet(f"{relative} is not a readable Parquet file: no PAR1 at its end")
    if footer > DECODED_BUDGET:
        raise PreviewTooLarge(relative, footer, DECODED_BUDGET, "its metadata")
    handle.seek(0)


def groups_to_read(metadata: Any, limit: int, relative: str, fd: int) -> list[int]:
    """The row groups that hold the first ``limit`` rows, in order (empty ones skipped).

    Raises PreviewTooLarge when what they decode to, summed, passes the budget: one group
    alone past it is refused even if it holds a single row."""
    chosen: list[int] = []
    rows = decoded = pages = 0
    for index in range(metadata.num_row_groups):
        if rows >= limit:
            break
        group = metadata.row_group(index)
        if group.num_rows <= 0:
            continue
        from_pages, counted = pages_decoded_size(group, fd, MAX_PAGES - pages)
        decoded += max(group_decoded_size(group), from_pages)
        pages += counted
        if decoded > DECODED_BUDGET:
            raise PreviewTooLarge(relative, decoded, DECODED_BUDGET, f"row groups 0-{index}")
        chosen.append(index)
        rows += group.num_rows
    return chosen


def group_decoded_size(group: Any) -> int:
    """A row group's uncompressed size as its metadata tells it: the larger of the group's
    own total and the sum of its column chunks (a writer may fill in only one of them)."""
    chunks = sum(max(group.column(i).total_uncompressed_size, 0) for i in range(group.num_columns))
    return max(group.total_byte_size, chunks, 0)


def pages_decoded_size(group: Any, fd: int, pages_left: int) -> tuple[int, int]:
    """What a row group's pages decode to as their own headers tell it (the metadata may
    understate it), and how many pages that took. Raises BadHeader (NotParquet)."""
    decoded = pages = 0
    for i in range(group.num_columns):
        chunk = group.column(i)
        start = chunk.data_page_offset
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        size, counted = chunk_decoded_size(
            fd, start, chunk.total_compressed_size, pages_left - pages
        )
        decoded += size
        pages += counted
    return decoded, pages


def _read_rows(reader: Any, groups: list[int], names: list[str], limit: int) -> list[Any]:
    rows: list[Any] = []
    for index in groups:
        table = reader.read_row_group(index, columns=names, use_threads=False)
        rows.extend(table.slice(0, limit - len(rows)).to_pylist())
        if len(rows) >= limit:
            break
    return rows


def _answer(reader: Any, names: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    schema = reader.schema_arrow
    total = reader.metadata.num_rows
    return {
        "columns": [{"name": name, "type": str(schema.field(name).type)} for name in names],
        "rows": [[json_cell(row.get(name)) for name in names] for row in rows],
        "total_rows": total,
        "truncated": {"rows": total > len(rows), "columns": len(schema.names) > len(names)},
    }


def build_preview_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task files"])

    @router.get("/tasks/{task_id}/preview/{path:path}")
    async def task_preview(request: Request, task_id: str, path: str, limit: int = DEFAULT_ROWS):
        if not 1 <= limit <= MAX_ROWS:
            raise InvalidLimit(f"limit must be 1-{MAX_ROWS}, got {limit}")
        opened = await open_task_file(services, request, task_id, path)
        return await run_in_threadpool(read_preview, opened, limit)

    return router
