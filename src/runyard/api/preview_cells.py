"""A preview's cells as JSON carries them, read from Arrow arrays within a cap.

A task's file may hold one 32 MiB string that every row points at, or a list of ten
million numbers in one cell; turning either into Python objects first would fill the
server. So a cell is read from the Arrow buffers and only what is shown is copied out:

- a string shows its first ``chars`` characters, binary its first 32 bytes as hex;
- a list, map or struct is written out as Python prints it, at most :data:`MAX_ITEMS`
  items at each level and ``chars`` characters in all;
- a dictionary-encoded cell is its entry, converted once per entry, not once per row;
- numbers, dates and times are converted whole (they are small): non-finite floats become
  ``"NaN"``/``"Infinity"``, dates ISO-8601, decimals strings.

A cell that was cut ends with :data:`CUT`. :func:`cell_chars` shares
:data:`ANSWER_CHARS` out among the cells, so a preview's answer stays bounded too.

Example::

    cells = column_cells(batch.column(0), chars=cell_chars(rows=50, columns=3))
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

MAX_CELL_CHARS = 500
MIN_CELL_CHARS = 32
ANSWER_CHARS = 8 * 1024 * 1024  # text one answer may carry, shared among its cells
MAX_BYTES_CELL = 32
MAX_ITEMS = 100  # items of a list, map or struct shown at each level
CUT = "…"
UTF8_MAX = 4  # bytes one character takes at most


def cell_chars(rows: int, columns: int) -> int:
    """How many characters each cell of a ``rows`` × ``columns`` answer may show."""
    share = ANSWER_CHARS // max(rows * columns, 1)
    return max(MIN_CELL_CHARS, min(MAX_CELL_CHARS, share))


def json_cell(value: Any) -> Any:
    """One small value (a number, a date, a decimal) as JSON can carry it."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return str(value)[:MAX_CELL_CHARS]


def column_cells(array: Any, chars: int) -> list[Any]:
    """The cells of one Arrow array (a column of a record batch), each within ``chars``."""
    import pyarrow as pa

    if _is_small(array.type):
        return [json_cell(value) for value in array.to_pylist()]
    if isinstance(array, pa.DictionaryArray):
        entries: dict[int, Any] = {}
        cells = []
        for index in array.indices.to_pylist():
            if index is not None and index not in entries:
                entries[index] = _cell(array.dictionary[index], chars)
            cells.append(None if index is None else entries[index])
        return cells
    return [_cell(array[row], chars) for row in range(len(array))]


def _is_small(arrow_type: Any) -> bool:
    import pyarrow as pa

    kinds = pa.types
    return bool(
        kinds.is_null(arrow_type)
        or kinds.is_boolean(arrow_type)
        or kinds.is_integer(arrow_type)
        or kinds.is_floating(arrow_type)
        or kinds.is_decimal(arrow_type)
        or kinds.is_temporal(arrow_type)
    )


def _cell(scalar: Any, chars: int) -> Any:
    import pyarrow as pa

    if not scalar.is_valid:
        return None
    if isinstance(scalar, pa.ExtensionScalar | pa.DictionaryScalar):
        return _cell(scalar.value, chars)
    if _is_text(scalar):
        text, cut = _text(scalar, chars)
        return text + CUT if cut else text
    if _is_bytes(scalar):
        data = _bytes(scalar, MAX_BYTES_CELL)
        return data.hex() + (CUT if len(data) < _size(scalar) else "")
    if _is_small(scalar.type):
        return json_cell(scalar.as_py())
    writer = _Writer(chars)
    _write(writer, scalar)
    return writer.text()


class _Writer:
    """Text written up to a number of characters; whatever goes past them is dropped."""

    def __init__(self, chars: int) -> None:
        self.parts: list[str] = []
        self.left = chars
        self.cut = False

    def write(self, text: str) -> bool:
        """Write ``text``; answers whether there is room for more."""
        if len(text) > self.left:
            text, self.cut = text[: self.left], True
        self.parts.append(text)
        self.left -= len(text)
        return not self.cut

    def text(self) -> str:
        return "".join(self.parts) + (CUT if self.cut else "")


def _write(writer: _Writer, scalar: Any) -> bool:
    """Write one value as Python prints it; answers whether there is room for more."""
    import pyarrow as pa

    if not scalar.is_valid:
        return writer.write("None")
    if isinstance(scalar, pa.ExtensionScalar | pa.DictionaryScalar):
        return _write(writer, scalar.value)
    if _is_text(scalar):
        return writer.write(repr(_text(scalar, writer.left)[0]))
    if _is_bytes(scalar):
        return writer.write(repr(_bytes(scalar, writer.left)))
    if isinstance(scalar, pa.MapScalar):
        return _write_items(writer, scalar.values, "[", "]", _write_pair)
    if isinstance(scalar, pa.StructScalar):
        return _write_items(writer, scalar, "{", "}", _write_field)
    if isinstance(scalar, _list_scalars()):
        return _write_items(writer, scalar.values, "[", "]", _write_item)
    return writer.write(repr(scalar.as_py()))


def _write_items(writer: _Writer, items: Any, opening: str, closing: str, write_one: Any) -> bool:
    if not writer.write(opening):
        return False
    for index in range(min(len(items), MAX_ITEMS)):
        if index and not writer.write(", "):
            return False
        if not write_one(writer, items, index):
            return False
    if len(items) > MAX_ITEMS and not writer.write(", " + CUT):
        return False
    return writer.write(closing)


def _write_item(writer: _Writer, items: Any, index: int) -> bool:
    return _write(writer, items[index])


def _write_pair(writer: _Writer, pairs: Any, index: int) -> bool:
    pair = pairs[index]
    return (
        writer.write("(")
        and _write(writer, pair[0])
        and writer.write(", ")
        and _write(writer, pair[1])
        and writer.write(")")
    )


def _write_field(writer: _Writer, struct: Any, index: int) -> bool:
    name = struct.type.field(index).name
    return writer.write(repr(name) + ": ") and _write(writer, struct[index])


def _list_scalars() -> tuple[Any, ...]:
    import pyarrow as pa

    return tuple(
        getattr(pa, name)
        for name in (
            "ListScalar",
            "LargeListScalar",
            "FixedSizeListScalar",
            "ListViewScalar",
            "LargeListViewScalar",
        )  # fmt: skip
        if hasattr(pa, name)
    )


def _is_text(scalar: Any) -> bool:
    import pyarrow as pa

    kind = scalar.type
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _is_bytes(scalar: Any) -> bool:
    import pyarrow as pa

    kind = scalar.type
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_fixed_size_binary(kind)
    )


def _size(scalar: Any) -> int:
    buffer = scalar.as_buffer()
    return 0 if buffer is None else int(buffer.size)


def _bytes(scalar: Any, count: int) -> bytes:
    """The first ``count`` bytes of a binary or string cell, copied from its buffer alone."""
    buffer = scalar.as_buffer()
    if buffer is None:
        return b""
    return buffer.slice(0, min(max(count, 0), buffer.size)).to_pybytes()


def _text(scalar: Any, chars: int) -> tuple[str, bool]:
    """The first ``chars`` characters of a string cell, and whether there were more."""
    data = _bytes(scalar, chars * UTF8_MAX)
    text = data.decode("utf-8", "replace")
    cut = len(text) > chars or len(data) < _size(scalar)
    return text[:chars], cut
