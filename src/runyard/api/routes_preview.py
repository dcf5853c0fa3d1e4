"""Tabular previews of a task's Parquet files, computed server-side, read-only.

``GET /api/v1/tasks/{task_id}/preview/{path}?limit=50`` answers
``{"columns": [{"name", "type"}], "rows": [[...]], "total_rows": N, "truncated": {...}}``
for the first ``limit`` rows (1-500) and at most :data:`MAX_COLUMNS` columns. The file is
opened exactly as a download is (``workspace.safefs.open_under``: once, no symlinks, no hard
links, no hidden names) and read only from that descriptor; a run token sees only its own
session's tasks, others answer as missing. pyarrow is optional for runyard: without it the
route answers 501.

A task's files are written by code the server does not trust, so a preview is sized before
anything is decoded (:mod:`runyard.api.parquet_budget`): the footer's length (the file's last
eight bytes) against :data:`DECODED_BUDGET`, then, from the page headers (the decoder obeys
them, not the footer's sizes), the pages that hold the first ``limit`` rows in every row
group they touch. Columns are then read one at a time, one row group at a time, and only
those pages: one column may hold at most :data:`DECODED_BUDGET` bytes, all of them
:data:`DECODED_TOTAL`. Strings are read as dictionaries, so one large entry that every row
points at is read once, not once per row. A file past the budget answers 413
(:class:`~runyard.errors.PreviewTooLarge`) naming the file, the column, the size and the
budget, whatever its size on disk (27 KB of zstd can hold 768 MiB).

Cells are read from the Arrow buffers within a cap (:mod:`runyard.api.preview_cells`): a
long string, a large list or struct is cut and ends with ``…``; no cell becomes a Python
object whole.
"""

from __future__ import annotations

import importlib
import os
import struct
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.parquet_budget import PreviewPlan, plan_preview
from runyard.api.preview_cells import cell_chars, column_cells
from runyard.api.routes_files import open_task_file
from runyard.api.services import Services
from runyard.errors import InvalidLimit, NotParquet, PreviewTooLarge, PreviewUnavailable
from runyard.workspace.safefs import OpenedFile

DEFAULT_ROWS = 50
MAX_ROWS = 500
MAX_COLUMNS = 200
DECODED_BUDGET = 64 * 1024 * 1024  # bytes a preview holds at once: the footer, one column
DECODED_TOTAL = 4 * DECODED_BUDGET  # bytes a preview may decode, all columns together
MAX_PAGES = 100_000  # page headers read to size one preview
READ_BUFFER = 64 * 1024  # pyarrow reads a column chunk through a buffer this size
TRAILER = struct.Struct("<I4s")  # a Parquet file ends with its footer's length and b"PAR1"


def _parquet() -> Any:
    try:
        return importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise PreviewUnavailable(
            "Parquet previews need pyarrow in the server's environment (pip install pyarrow)"
        ) from exc


def read_preview(opened: OpenedFile, limit: int) -> dict[str, Any]:
    """The first ``limit`` rows of the Parquet file open on ``opened`` (closed here).

    Raises PreviewTooLarge before decoding when they would pass :data:`DECODED_BUDGET`,
    NotParquet for a file Parquet cannot read."""
    return _answer(*read_rows(opened, limit))


def read_rows(opened: OpenedFile, limit: int) -> tuple[Any, Any, list[list[Any]]]:
    """The footer, the Arrow schema and the cells (one list a shown column) of the first
    ``limit`` rows, read within the budget as :func:`read_preview` says (``opened`` is
    closed here). The AxonX ``preview_file`` job shapes them its own way."""
    with opened, os.fdopen(os.dup(opened.fd), "rb") as handle:
        parquet = _parquet()
        _check_footer(handle, opened.relative)
        try:
            schema_reader = parquet.ParquetFile(handle)
            metadata, schema = schema_reader.metadata, schema_reader.schema_arrow
            shown = min(len(schema), MAX_COLUMNS)
            plan = plan_preview(metadata, schema, columns=shown, limit=limit, fd=opened.fd,
                                relative=opened.relative, budget=DECODED_BUDGET,
                                total=DECODED_TOTAL, max_pages=MAX_PAGES)  # fmt: skip
            reader = parquet.ParquetFile(
                handle, metadata=metadata, read_dictionary=plan.dictionary_leaves,
                pre_buffer=False, buffer_size=READ_BUFFER,
            )  # fmt: skip
            columns = [_read_column(reader, plan, leaves) for leaves in plan.leaves]
        except (NotParquet, PreviewTooLarge):
            raise
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise NotParquet(f"{opened.relative} is not a readable Parquet file: {exc}") from exc
        return metadata, schema, columns


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


def _read_column(reader: Any, plan: PreviewPlan, leaves: tuple[int, ...]) -> list[Any]:
    """One column's cells, read row group by row group, each only as far as its rows: the
    batch reader decodes page by page (``pre_buffer`` off, so nothing is read ahead)."""
    rows = sum(count for _, count in plan.groups)
    chars = cell_chars(rows, len(plan.leaves))
    cells: list[Any] = []
    for group, count in plan.groups:
        # the leaf indices, not the name: pyarrow resolves a name by dotted paths, which a
        # crafted schema can make ambiguous
        batches = reader.reader.iter_batches(count, [group], column_indices=list(leaves),
                                             use_threads=False)  # fmt: skip
        taken = 0
        for batch in batches:
            part = batch.column(0).slice(0, count - taken)
            cells.extend(column_cells(part, chars))
            taken += len(part)
            if taken >= count:
                break
        batches.close()
        if taken < count:
            raise ValueError(f"row group {group} holds {taken} rows, its footer more")
    return cells


def _answer(metadata: Any, schema: Any, columns: list[list[Any]]) -> dict[str, Any]:
    total = metadata.num_rows
    shown = len(columns[0]) if columns else 0
    return {
        "columns": [
            {"name": field.name, "type": str(field.type)}
            for field in map(schema.field, range(len(columns)))
        ],
        "rows": [list(row) for row in zip(*columns, strict=True)] if columns else [],
        "total_rows": total,
        "truncated": {"rows": total > shown, "columns": len(schema) > len(columns)},
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
