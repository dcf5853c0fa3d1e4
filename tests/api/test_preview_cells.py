"""Cells read from Arrow arrays within their cap: long strings and binary cut with a mark,
lists, maps and structs written out as Python prints them up to a number of items and
characters, dictionary entries read once and never copied whole, small values whole."""

from __future__ import annotations

import datetime
import decimal

import pytest

from runyard.api.preview_cells import (
    ANSWER_CHARS,
    CUT,
    MAX_CELL_CHARS,
    MAX_ITEMS,
    MIN_CELL_CHARS,
    cell_chars,
    column_cells,
)

pa = pytest.importorskip("pyarrow")

MIB = 1024 * 1024


def huge(size: int, byte: bytes = b"h") -> pa.StringArray:
    """One string cell of ``size`` bytes, built from a buffer (no Python string)."""
    offsets = pa.array([0, size], pa.int32()).buffers()[1]
    return pa.StringArray.from_buffers(1, offsets, pa.py_buffer(byte * size))


def test_small_values_are_whole_and_json_safe() -> None:
    values = [1.5, float("nan"), float("inf"), float("-inf"), None]
    assert column_cells(pa.array(values), 500) == [1.5, "NaN", "Infinity", "-Infinity", None]
    assert column_cells(pa.array([2**62, None, -3]), 10) == [2**62, None, -3]
    assert column_cells(pa.array([datetime.date(2024, 2, 29)]), 10) == ["2024-02-29"]
    assert column_cells(pa.array([decimal.Decimal("1.25")]), 10) == ["1.25"]
    assert column_cells(pa.array([True, False]), 10) == [True, False]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.string_view()])
def test_strings_are_cut_at_the_cap_with_a_mark(kind: pa.DataType) -> None:
    cells = column_cells(pa.array(["short", "x" * 600, "é" * 600, None], kind), 500)
    assert cells == ["short", "x" * 500 + CUT, "é" * 500 + CUT, None]
    assert column_cells(pa.array(["y" * 500], kind), 500) == ["y" * 500]


def test_binary_shows_a_short_hex() -> None:
    cells = column_cells(pa.array([b"\x00\x01", b"z" * 40, None]), 500)
    assert cells == ["0001", "7a" * 32 + CUT, None]
    fixed = column_cells(pa.array([b"ab"], pa.binary(2)), 500)
    assert fixed == ["6162"]


def test_a_dictionary_entry_is_read_once_and_never_copied_whole() -> None:
    """500 rows pointing at one 32 MiB entry, and lists of them: what is allocated while
    the cells are made stays far below one copy of the entry."""
    entry = huge(32 * MIB)
    column = pa.DictionaryArray.from_arrays(pa.array([0] * 500 + [None], pa.int32()), entry)
    lists = pa.ListArray.from_arrays(pa.array([0, 3, 3], pa.int32()), column.slice(0, 3))
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    cells = column_cells(column, 40)
    nested = column_cells(lists, 60)
    assert pool.bytes_allocated() - before < MIB
    assert cells[:2] == ["h" * 40 + CUT] * 2 and cells[500] is None and len(cells) == 501
    assert nested == [("['" + "h" * 60)[:60] + CUT, "[]"]


def test_lists_show_their_first_items_and_say_so() -> None:
    width = 1000
    values = pa.array(range(3 * width), pa.int64())
    offsets = pa.array([0, width, width, 3 * width], pa.int32())
    lists = pa.ListArray.from_arrays(offsets, values)

    def shown(start: int) -> str:
        return "[" + ", ".join(str(start + i) for i in range(MAX_ITEMS)) + ", " + CUT + "]"

    assert column_cells(lists, 100_000) == [shown(0), "[]", shown(width)]
    assert column_cells(lists, 20) == [
        "[0, 1, 2, 3, 4, 5, 6" + CUT,
        "[]",
        "[1000, 1001, 1002, 1" + CUT,
    ]
    assert column_cells(pa.array([[1, None], None]), 50) == ["[1, None]", None]


def test_maps_structs_and_nested_lists_are_written_as_python_prints_them() -> None:
    maps = pa.array([[("k", 1), ("l", None)], []], pa.map_(pa.string(), pa.int64()))
    assert column_cells(maps, 500) == ["[('k', 1), ('l', None)]", "[]"]
    structs = pa.array([{"a": "q", "b": [1, 2]}, None, {"a": None, "b": None}])
    assert column_cells(structs, 500) == ["{'a': 'q', 'b': [1, 2]}", None,
                                          "{'a': None, 'b': None}"]  # fmt: skip
    deep = pa.array([[[["x" * 30]]]])
    assert column_cells(deep, 10) == ["[[['xxxxxx" + CUT]
    wide = pa.array([{f"f{i}": i for i in range(150)}])
    (cell,) = column_cells(wide, 100_000)
    assert cell.endswith(f"'f{MAX_ITEMS - 1}': {MAX_ITEMS - 1}, {CUT}}}")


def test_a_list_of_ten_million_items_is_read_no_further_than_shown() -> None:
    values = pa.repeat(pa.scalar(7, pa.int64()), 10_000_000)
    lists = pa.ListArray.from_arrays(pa.array([0, 10_000_000], pa.int32()), values)
    (cell,) = column_cells(lists, MAX_CELL_CHARS)
    assert cell == "[" + ", ".join(["7"] * MAX_ITEMS) + ", " + CUT + "]"


def test_json_extension_cells_are_their_text() -> None:
    if not hasattr(pa, "json_"):
        pytest.skip("no JSON extension type in this pyarrow")
    cells = column_cells(pa.array(['{"a": 1}', "[" * 600], pa.json_()), 500)
    assert cells == ['{"a": 1}', "[" * 500 + CUT]


def test_an_answer_shares_its_characters_among_its_cells() -> None:
    assert cell_chars(50, 10) == MAX_CELL_CHARS
    assert cell_chars(500, 200) == ANSWER_CHARS // 100_000
    assert cell_chars(500, 200) * 500 * 200 <= ANSWER_CHARS
    assert cell_chars(10**6, 10**6) == MIN_CELL_CHARS
