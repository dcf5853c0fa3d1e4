"""Page headers read without decoding: real files written by pyarrow in several layouts,
and hostile header bytes (cut short, nested deep, endless pages) refused as BadHeader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runyard.api.parquet_pages import (
    DATA_PAGE,
    DATA_PAGE_V2,
    DICTIONARY_PAGE,
    BadHeader,
    PageHeader,
    ShortHeader,
    chunk_decoded_size,
    pages_for_rows,
    parse_page_header,
    read_page_header,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def chunk_sizes(path: Path, pages_left: int = 1000) -> list[tuple[int, int, int]]:
    """(footer's uncompressed size, size from the page headers, pages) of each chunk."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        found = []
        for i in range(group.num_columns):
            chunk = group.column(i)
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            size, pages = chunk_decoded_size(fd, start, chunk.total_compressed_size, pages_left)
            found.append((chunk.total_uncompressed_size, size, pages))
        return found
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "options",
    [{}, {"data_page_version": "2.0"}, {"compression": "zstd"}, {"use_dictionary": False},
     {"write_page_index": True}, {"data_page_size": 64}],
)  # fmt: skip
def test_real_files_are_sized_from_their_headers(
    tmp_path: Path, options: dict[str, object]
) -> None:
    table = pa.table({
        "s": [f"value {i}" * (i % 7) for i in range(3000)],
        "n": list(range(3000)),
        "l": [[i, None, 2] for i in range(3000)],
        "m": pa.array([[("k", i)] for i in range(3000)], pa.map_(pa.string(), pa.int64())),
    })  # fmt: skip
    pq.write_table(table, tmp_path / "t.parquet", **options)
    for claimed, measured, pages in chunk_sizes(tmp_path / "t.parquet"):
        assert pages >= 1
        assert measured >= claimed * 0.8, (claimed, measured)  # the footer adds header bytes


def test_a_header_cut_short_or_nested_too_deep_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ShortHeader):
        parse_page_header(bytes([0x15, 0x00, 0x15]))  # type, then uncompressed size cut
    with pytest.raises(BadHeader, match="nested too deep"):
        parse_page_header(bytes([0x1C]) * 40)  # struct in struct in struct...
    with pytest.raises(BadHeader, match="unknown Thrift type"):
        parse_page_header(bytes([0x1D]))
    with pytest.raises(BadHeader, match="without its sizes"):
        parse_page_header(bytes([0x15, 0x00, 0x00]))
    path = tmp_path / "cut.bin"
    path.write_bytes(bytes([0x15, 0x00, 0x15]))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(BadHeader, match="ends inside"):
            read_page_header(fd, 0)
    finally:
        os.close(fd)


def test_pages_past_the_count_allowed_are_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"n": list(range(50_000))}), tmp_path / "p.parquet",
                   use_dictionary=False, data_page_size=1024)  # fmt: skip
    ((_, _, pages),) = chunk_sizes(tmp_path / "p.parquet")
    assert pages > 3
    with pytest.raises(BadHeader, match="more than 3 pages"):
        chunk_sizes(tmp_path / "p.parquet", pages_left=3)


def headers_for_rows(path: Path, rows: int | None) -> list[PageHeader]:
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        return list(pages_for_rows(fd, start, chunk.total_compressed_size, rows, 1000))
    finally:
        os.close(fd)


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [True, False])
def test_the_first_rows_need_only_their_pages_and_the_next(
    tmp_path: Path, version: str, dictionary: bool
) -> None:
    """The dictionary page, the data pages up to the one holding the last row asked for,
    and one more (the decoder may look into it); every page when the rows are not known."""
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"n": [i * 7919 for i in range(50_000)]}), path,
                   use_dictionary=dictionary, data_page_size=1024,
                   data_page_version=version)  # fmt: skip
    every = headers_for_rows(path, None)
    data = [header for header in every if header.kind in (DATA_PAGE, DATA_PAGE_V2)]
    head = len(every) - len(data)
    assert len(data) > 5 and head == int(dictionary)
    assert all(header.kind == DICTIONARY_PAGE for header in every[:head])
    first = data[0].values
    assert headers_for_rows(path, 1) == every[: head + 2]
    assert headers_for_rows(path, first) == every[: head + 2]
    assert headers_for_rows(path, first + 1) == every[: head + 3]
    assert headers_for_rows(path, 50_000) == every
    assert sum(header.values for header in data) == 50_000
