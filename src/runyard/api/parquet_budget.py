"""What a Parquet preview's reader will hold, sized from page headers before decoding.

A preview reads one column of one row group at a time, with pyarrow's batch reader, which
decodes page by page and stops once it has the rows asked for. So only the pages holding
the first ``limit`` rows count (:func:`~runyard.api.parquet_pages.pages_for_rows`): a
legitimate 80 MB row group costs a few MiB at ``limit=20``, a bomb's pages are caught
whichever row group hides them.

Each page counts as what the reader keeps of it, measured with pyarrow 26 at the peak of
its memory pool:

- a page is held decompressed and decoded: twice its decoded size;
- a string or binary column is read as a DictionaryArray (never expanded to one copy of
  its entry per row, which is how 1 KB of pages becomes gigabytes): its data pages count
  three times (the page, the memo table, the dictionary returned) and its dictionary page
  four times (the decoder keeps a copy of its values as well).

One column, over all the row groups it is read from, must stay within ``budget`` (what the
server holds at once, since columns are read one after another), and all columns together
within ``total`` (the decoding one preview may cost). Past either: PreviewTooLarge.

Example::

    plan = plan_preview(metadata, schema, columns=200, limit=20, fd=fd,
                        relative="out/t.parquet", budget=64 << 20, total=256 << 20,
                        max_pages=100_000)
    plan.groups  # ((0, 20),): 20 rows from row group 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runyard.api.parquet_pages import DICTIONARY_PAGE, VALUE_BYTES, pages_for_rows
from runyard.errors import NotParquet, PreviewTooLarge

HELD = 2  # a page decompressed, and what it decodes to
HELD_AS_DICTIONARY = 3  # a string page read as dictionary: the page, the memo table, the result
HELD_DICTIONARY_PAGE = 4  # and the decoder's own copy of the dictionary's values
INT96_BYTES = 12
NAME_CHARS = 80  # of a column's name in a message (the name is the file's word)


@dataclass(frozen=True)
class PreviewPlan:
    """How to read a preview: ``groups`` holds (row group, rows to take from it) in order;
    ``leaves[c]`` the file's leaf columns of the c-th column shown; ``dictionary_leaves``
    the string and binary leaves, to be read as dictionaries."""

    groups: tuple[tuple[int, int], ...]
    leaves: tuple[tuple[int, ...], ...]
    dictionary_leaves: tuple[int, ...]


@dataclass(frozen=True)
class _Budget:
    relative: str
    names: tuple[str, ...]
    budget: int
    total: int
    max_pages: int


def plan_preview(
    metadata: Any,
    schema: Any,
    *,
    columns: int,
    limit: int,
    fd: int,
    relative: str,
    budget: int,
    total: int,
    max_pages: int,
) -> PreviewPlan:
    """The plan to read the first ``limit`` rows of the first ``columns`` fields of
    ``schema`` (the file's Arrow schema) from the file open on ``fd`` whose footer is
    ``metadata``. Raises PreviewTooLarge past the budget, NotParquet for a footer whose
    leaves are not its schema's (BadHeader, a NotParquet, for damaged page headers)."""
    leaves = _leaves_of_fields(metadata, schema, relative)[:columns]
    names = tuple(schema.names[:columns])
    limits = _Budget(relative, names, budget, total, max_pages)
    groups = _size_groups(metadata, leaves, limit, fd, limits)
    physical = metadata.schema
    strings = tuple(
        leaf
        for column in leaves
        for leaf in column
        if physical.column(leaf).physical_type == "BYTE_ARRAY"
    )
    return PreviewPlan(groups, leaves, strings)


def _leaves_of_fields(metadata: Any, schema: Any, relative: str) -> tuple[tuple[int, ...], ...]:
    """The leaf columns of each field, in the file's order (a field's leaves follow each
    other; the first field starts at leaf 0)."""
    counts = [_leaf_count(field.type) for field in schema]
    leaves, first = [], 0
    for count in counts:
        leaves.append(tuple(range(first, first + count)))
        first += count
    if first != metadata.num_columns:
        raise NotParquet(
            f"{relative} is not a readable Parquet file: its schema has {first} leaf "
            f"columns, its footer {metadata.num_columns}"
        )
    return tuple(leaves)


def _leaf_count(arrow_type: Any) -> int:
    import pyarrow as pa

    if isinstance(arrow_type, pa.BaseExtensionType):
        return _leaf_count(arrow_type.storage_type)
    if pa.types.is_map(arrow_type):
        return _leaf_count(arrow_type.key_type) + _leaf_count(arrow_type.item_type)
    if pa.types.is_struct(arrow_type):
        return sum(_leaf_count(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    lists = ("is_list", "is_large_list", "is_fixed_size_list", "is_list_view",
             "is_large_list_view")  # fmt: skip
    if any(getattr(pa.types, name, lambda _: False)(arrow_type) for name in lists):
        return _leaf_count(arrow_type.value_type)
    return 1


def _size_groups(
    metadata: Any, leaves: tuple[tuple[int, ...], ...], limit: int, fd: int, limits: _Budget
) -> tuple[tuple[int, int], ...]:
    held = [0] * len(leaves)
    groups: list[tuple[int, int]] = []
    taken = pages = spent = 0
    for index in range(metadata.num_row_groups):
        if taken >= limit:
            break
        group = metadata.row_group(index)
        if group.num_rows <= 0:
            continue
        rows = min(limit - taken, group.num_rows)
        for column, column_leaves in enumerate(leaves):
            for leaf in column_leaves:
                size, counted = _leaf_held(metadata.schema.column(leaf), group.column(leaf),
                                           rows, fd, limits.max_pages - pages)  # fmt: skip
                held[column] += size
                spent += size
                pages += counted
            _check(limits, held[column], spent, column, index)
        groups.append((index, rows))
        taken += rows
    return tuple(groups)


def _check(limits: _Budget, held: int, spent: int, column: int, group: int) -> None:
    where = f"row groups 0-{group}"
    if held > limits.budget:
        part = f"column {limits.names[column][:NAME_CHARS]!r} in {where}"
        raise PreviewTooLarge(limits.relative, held, limits.budget, part)
    if spent > limits.total:
        part = f"the first {column + 1} columns in {where}"
        raise PreviewTooLarge(limits.relative, spent, limits.total, part)


def _leaf_held(column: Any, chunk: Any, rows: int, fd: int, pages_left: int) -> tuple[int, int]:
    """What reading the first ``rows`` rows of one column chunk holds, and the pages read."""
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
        start = chunk.dictionary_page_offset
    strings = column.physical_type == "BYTE_ARRAY"
    width = _value_bytes(column)
    flat_rows = rows if column.max_repetition_level == 0 else None
    held = pages = 0
    for header in pages_for_rows(fd, start, chunk.total_compressed_size, flat_rows, pages_left):
        if not strings:
            copies = HELD
        elif header.kind == DICTIONARY_PAGE:
            copies = HELD_DICTIONARY_PAGE
        else:
            copies = HELD_AS_DICTIONARY
        held += header.decoded(width) * copies
        pages += 1
    return held, pages


def _value_bytes(column: Any) -> int:
    """What one value decodes to at most: a fixed-length column's length (a dictionary of
    one 32 MiB entry repeats it per row), 12 bytes for INT96, else 8."""
    if column.physical_type == "FIXED_LEN_BYTE_ARRAY":
        return max(column.length, VALUE_BYTES)
    if column.physical_type == "INT96":
        return INT96_BYTES
    return VALUE_BYTES
