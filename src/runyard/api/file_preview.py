"""Previews of workspace files in AxonX 0.2.2's shapes (``preview_file``), read from a
descriptor that :func:`runyard.workspace.safefs.open_under` opened once.

The kind comes from the suffix, as AxonX's does: text, Markdown (with its front matter),
JSON and YAML (parsed when whole), CSV and JSONL (a page of rows), Parquet (through the
bounded reader of the ``/api/v1`` preview route, :func:`runyard.api.routes_preview.read_rows`);
anything else answers ``{"kind": "unsupported", "size": ...}``. Every read is bounded:
text at ``max_bytes`` (512 KiB unless asked), JSON and YAML at 32 MiB, a JSONL page at
512 KiB, a CSV row at 1 Mi characters and a page at 8 Mi (``has_more`` says it stopped
early), a Parquet page at :data:`MAX_PARQUET_ROWS` rows from the start within the route's
decode budget. JSON is parsed only up to :data:`PARSE_CHARS` (parsed data takes ten
times its text and more), YAML and front matter up to :data:`YAML_PARSE_CHARS` (its parser
is slow); a longer one answers its text, not parsed. YAML aliases are refused rather
than expanded (a few lines of aliases can stand for billions of nodes).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import os
from datetime import date, datetime
from typing import Any

import yaml

from runyard.errors import InvalidInput, InvalidLimit
from runyard.workspace.safefs import OpenedFile

TEXT_BYTES = 512 * 1024
MAX_STRUCTURED_BYTES = 32 * 1024 * 1024
PARSE_CHARS = 4 * 1024 * 1024  # JSON parsed into data: at most this
YAML_PARSE_CHARS = 256 * 1024  # YAML (a file, front matter): the parser is pure Python, ~5 s/MiB
JSONL_PAGE_BYTES = 512 * 1024
MAX_CSV_ROW_CHARS = 1024 * 1024  # one row, quoted line breaks and all
CSV_PAGE_CHARS = 8 * 1024 * 1024  # the rows of one page: a page stops early past it
MAX_PARQUET_ROWS = 5_000  # offset + limit of a Parquet page: read from the first row
KINDS = {
    ".txt": "text", ".md": "markdown", ".markdown": "markdown", ".json": "json",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".yaml": "yaml", ".yml": "yaml", ".csv": "csv",
    ".parquet": "parquet",
}  # fmt: skip


def preview_kind(name: str) -> str | None:
    return KINDS.get(os.path.splitext(name)[1].lower())


def preview(opened: OpenedFile, offset: int, limit: int, max_bytes: int | None) -> dict[str, Any]:
    """The preview of the file open on ``opened`` (closed here)."""
    kind = preview_kind(opened.name)
    size = opened.size
    if kind == "parquet":
        return _parquet(opened, offset, limit)
    with opened:
        if kind is None:
            return {"kind": "unsupported", "size": size}
        if kind == "jsonl":
            return _jsonl(opened.fd, size, offset, limit)
        if kind == "csv":
            return _csv(opened.fd, size, offset, limit)
        if kind in ("json", "yaml"):
            return _structured(opened.fd, size, kind, max_bytes)
        return _text(opened.fd, size, kind, max_bytes or TEXT_BYTES)


def _read(fd: int, count: int, start: int = 0) -> bytes:
    chunks, got = [], 0
    while got < count:
        chunk = os.pread(fd, min(count - got, 1 << 20), start + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _text_prefix(fd: int, max_bytes: int) -> tuple[str, bool]:
    data = _read(fd, max_bytes + 1)
    truncated = len(data) > max_bytes
    try:
        if truncated:  # an incomplete last character is left out, a bad one refused
            return codecs.getincrementaldecoder("utf-8-sig")().decode(data[:max_bytes]), True
        return data.decode("utf-8-sig"), False
    except UnicodeDecodeError as exc:
        raise InvalidInput("the file is not UTF-8 text") from exc


def _text(fd: int, size: int, kind: str, max_bytes: int) -> dict[str, Any]:
    content, truncated = _text_prefix(fd, max_bytes)
    if kind == "text":
        return {"kind": "text", "size": size, "content": content, "truncated": truncated}
    front, body, error = _front_matter(content)
    return {
        "kind": "markdown", "size": size, "content": body, "frontmatter": front,
        "frontmatter_error": error, "truncated": truncated,
    }  # fmt: skip


def _front_matter(content: str) -> tuple[Any, str, str | None]:
    if not content.startswith(("---\n", "---\r\n")):
        return None, content, None
    lines = content.splitlines(keepends=True)
    closing = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), None)
    if closing is None:
        return None, content, "Frontmatter closing delimiter was not found"
    body = "".join(lines[closing + 1 :])
    raw = "".join(lines[1:closing])
    if len(raw) > YAML_PARSE_CHARS:
        return None, body, f"Frontmatter not parsed: longer than {YAML_PARSE_CHARS} characters"
    try:
        return _plain(_load_yaml(raw)), body, None
    except (yaml.YAMLError, RecursionError) as exc:
        return None, body, f"Invalid frontmatter: {exc}"


class _NoAliases(yaml.SafeLoader):
    """SafeLoader that refuses an alias instead of sharing (and later expanding) a node."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.MarkedYAMLError(None, None, "aliases are not expanded in a preview", mark)
        return super().compose_node(parent, index)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_NoAliases)  # noqa: S506 - a SafeLoader


def _plain(value: Any) -> Any:
    """``value`` as JSON carries it (YAML's dates, sets and non-finite floats)."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, date | datetime):
        return value.isoformat()
    return str(value)


def _structured(fd: int, size: int, kind: str, max_bytes: int | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"kind": kind, "size": size, "content": "", "data": None,
                              "parse_error": None, "truncated": False}  # fmt: skip
    if max_bytes is None and size > MAX_STRUCTURED_BYTES:
        limit = f"File exceeds the {MAX_STRUCTURED_BYTES} byte preview limit"
        return {**answer, "truncated": True, "parse_error": limit}
    content, truncated = _text_prefix(fd, max_bytes or MAX_STRUCTURED_BYTES)
    if truncated:
        partial = "Partial preview; increase max_bytes to parse the complete file"
        return {**answer, "content": content, "truncated": True, "parse_error": partial}
    bound = PARSE_CHARS if kind == "json" else YAML_PARSE_CHARS
    if len(content) > bound:  # parsed, it would take ten times that and more, or long
        unparsed = f"Not parsed: a preview parses at most {bound} characters of {kind}"
        return {**answer, "content": content, "parse_error": unparsed}
    try:
        data = json.loads(content) if kind == "json" else _plain(_load_yaml(content))
    except json.JSONDecodeError as exc:
        error = f"Line {exc.lineno}, column {exc.colno}: {exc.msg}"
        return {**answer, "content": content, "parse_error": error}
    except yaml.YAMLError as exc:
        return {**answer, "content": content, "parse_error": _yaml_error(exc)}
    except RecursionError:
        return {**answer, "content": content, "parse_error": "nested too deeply to parse"}
    return {**answer, "data": data}


def _yaml_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"Line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _jsonl(fd: int, size: int, offset: int, limit: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    truncated = False
    with os.fdopen(os.dup(fd), "rb") as handle:
        for _ in range(offset):
            if not _line(handle, JSONL_PAGE_BYTES)[0]:
                break
        budget = JSONL_PAGE_BYTES
        while len(rows) < limit and budget > 0:
            raw, oversized = _line(handle, budget)
            if not raw:
                break
            budget -= len(raw)
            truncated = truncated or oversized
            rows.append(_jsonl_row(raw, offset + len(rows) + 1, oversized))
        has_more = bool(handle.read(1))
    return {"kind": "jsonl", "size": size, "rows": rows, "offset": offset, "limit": limit,
            "has_more": has_more, "truncated": truncated}  # fmt: skip


def _line(handle: io.BufferedReader, budget: int) -> tuple[bytes, bool]:
    """One line, at most ``budget`` bytes of it kept; the rest of a longer one skipped."""
    raw = handle.readline(budget + 1)
    oversized = len(raw) > budget
    if oversized and not raw.endswith(b"\n"):
        while chunk := handle.readline(JSONL_PAGE_BYTES):
            if chunk.endswith(b"\n"):
                break
    return raw[:budget], oversized


def _jsonl_row(raw: bytes, line: int, oversized: bool) -> dict[str, Any]:
    encoding = "utf-8-sig" if line == 1 else "utf-8"
    content = raw.decode(encoding, errors="replace").rstrip("\r\n")
    row = {"line": line, "truncated": oversized, "content": content, "data": None,
           "parse_error": None}  # fmt: skip
    if oversized:
        return row
    try:
        row["data"] = _plain(json.loads(raw.decode(encoding).rstrip("\r\n")))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        row["parse_error"] = str(exc) or type(exc).__name__
    return row


def _csv(fd: int, size: int, offset: int, limit: int) -> dict[str, Any]:
    raw = os.fdopen(os.dup(fd), "rb")
    try:
        with io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as handle:
            lines = _CsvLines(handle)
            reader = csv.reader(lines)
            columns = _csv_row(reader, lines) or []
            for _ in range(offset):
                if _csv_row(reader, lines) is None:
                    break
            rows: list[list[str]] = []
            budget = CSV_PAGE_CHARS
            while len(rows) < limit and budget > 0:
                row = _csv_row(reader, lines)
                if row is None:
                    break
                rows.append(row)
                budget -= lines.used
            has_more = _csv_row(reader, lines) is not None
    except UnicodeDecodeError as exc:
        raise InvalidInput("the CSV file is not UTF-8 text") from exc
    except csv.Error as exc:
        raise InvalidInput(f"the CSV file cannot be read: {exc}") from exc
    return {"kind": "csv", "size": size, "columns": columns, "rows": rows,
            "offset": offset, "limit": limit, "has_more": has_more}  # fmt: skip


class _CsvLines:
    """The file's lines for :mod:`csv`, counting what the current row has taken: one row
    (quoted line breaks included) may take at most :data:`MAX_CSV_ROW_CHARS`."""

    def __init__(self, handle: io.TextIOWrapper) -> None:
        self.handle, self.used = handle, 0

    def __iter__(self) -> _CsvLines:
        return self

    def __next__(self) -> str:
        line = self.handle.readline(MAX_CSV_ROW_CHARS + 1 - self.used)
        if not line:
            raise StopIteration
        self.used += len(line)
        if self.used > MAX_CSV_ROW_CHARS:
            raise InvalidInput(f"a CSV row is longer than {MAX_CSV_ROW_CHARS} characters")
        return line


def _csv_row(reader: Any, lines: _CsvLines) -> list[str] | None:
    lines.used = 0
    return next(reader, None)


def _parquet(opened: OpenedFile, offset: int, limit: int) -> dict[str, Any]:
    if offset + limit > MAX_PARQUET_ROWS:
        opened.close()
        raise InvalidLimit(
            f"a Parquet preview reads from the first row: offset + limit must be at most "
            f"{MAX_PARQUET_ROWS}, got {offset + limit}"
        )
    size = opened.size
    # the route's module brings FastAPI: loaded on the first Parquet page, not with the jobs
    from runyard.api.routes_preview import read_rows

    metadata, schema, cells = read_rows(opened, offset + limit)
    fields = [schema.field(i) for i in range(len(cells))]
    rows = [list(row) for row in zip(*cells, strict=True)] if cells else []
    total = metadata.num_rows
    return {
        "kind": "parquet", "size": size, "columns": [f.name for f in fields],
        "column_schema": [
            {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in fields
        ],
        "rows": rows[offset:], "offset": offset, "limit": limit,
        "has_more": offset + len(rows[offset:]) < total, "row_count": total,
        "row_group_count": metadata.num_row_groups,
    }  # fmt: skip
