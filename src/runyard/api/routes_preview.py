"""Tabular previews of a task's Parquet files, computed server-side, read-only.

``GET /api/v1/tasks/{task_id}/preview/{path}?limit=50`` answers
``{"columns": [{"name", "type"}], "rows": [[...]], "total_rows": N, "truncated": {...}}``
for the first ``limit`` rows (1-500). The file is opened exactly as a download is
(``workspace.safefs.open_under``: once, no symlinks, no hard links, no hidden names) and
read only from that descriptor; a run token sees only its own session's tasks, others
answer as missing. pyarrow is optional for runyard: without it the route answers 501.

Cells are made JSON-safe: non-finite floats become the strings ``"NaN"``/``"Infinity"``,
dates ISO-8601, bytes a short hex, anything else ``str``; a long cell is cut.
"""

from __future__ import annotations

import datetime
import decimal
import importlib
import math
import os
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.routes_files import open_task_file
from runyard.api.services import Services
from runyard.errors import InvalidLimit, NotParquet, PreviewUnavailable
from runyard.workspace.safefs import OpenedFile

DEFAULT_ROWS = 50
MAX_ROWS = 500
MAX_COLUMNS = 200
MAX_CELL_CHARS = 500
MAX_BYTES_CELL = 32
MAX_GROUP_BYTES = 256 * 1024 * 1024


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
    """The first ``limit`` rows of the Parquet file open on ``opened`` (closed here)."""
    with opened, os.fdopen(os.dup(opened.fd), "rb") as handle:
        parquet = _parquet()
        try:
            reader = parquet.ParquetFile(handle)
            _check_first_group(reader.metadata, opened.relative)
            schema = reader.schema_arrow
            names = schema.names[:MAX_COLUMNS]
            batch = next(reader.iter_batches(batch_size=limit, columns=names), None)
            total = reader.metadata.num_rows
        except NotParquet:
            raise
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise NotParquet(f"{opened.relative} is not a readable Parquet file: {exc}") from exc
    rows = [] if batch is None else batch.to_pylist()[:limit]
    return {
        "columns": [{"name": name, "type": str(schema.field(name).type)} for name in names],
        "rows": [[json_cell(row.get(name)) for name in names] for row in rows],
        "total_rows": total,
        "truncated": {"rows": total > len(rows), "columns": len(schema.names) > len(names)},
    }


def _check_first_group(metadata: Any, relative: str) -> None:
    """Refuse a file whose first row group is too large to decode for a preview."""
    if metadata.num_row_groups and metadata.row_group(0).total_byte_size > MAX_GROUP_BYTES:
        raise NotParquet(f"{relative}: its first row group is too large to preview")


def build_preview_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task files"])

    @router.get("/tasks/{task_id}/preview/{path:path}")
    async def task_preview(request: Request, task_id: str, path: str, limit: int = DEFAULT_ROWS):
        if not 1 <= limit <= MAX_ROWS:
            raise InvalidLimit(f"limit must be 1-{MAX_ROWS}, got {limit}")
        opened = await open_task_file(services, request, task_id, path)
        return await run_in_threadpool(read_preview, opened, limit)

    return router
