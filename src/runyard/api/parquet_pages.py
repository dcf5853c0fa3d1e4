"""What a Parquet column chunk decodes to, as its page headers tell it, without decoding.

The sizes in a file's footer are written by whoever wrote the file and pyarrow does not
hold a reader to them: a footer may claim a 1,000-byte row group whose pages decompress to
80 MiB. The page headers are what the decoder itself obeys (it allocates each page's
``uncompressed_page_size`` and fails on any other length), so a preview sums them, reading
only the headers (Thrift compact protocol) and skipping the page bodies.

Each page counts as the larger of its uncompressed size and ``num_values`` times the width
of one value (8 bytes, or a fixed-length column's own), because run-length, delta and
dictionary encodings decode a few bytes into millions of values.

A preview needs only the pages that hold its first rows: :func:`pages_for_rows` stops after
them (and one more, which the decoder may look into), counting the dictionary page, which
the decoder reads before any of them.

Example::

    size, pages = chunk_decoded_size(fd, start, length, pages_left=100_000)
    for header in pages_for_rows(fd, start, length, rows=20, pages_left=100_000): ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

HEADER_WINDOW = 64 * 1024  # the first read of a header; grown for headers with statistics
MAX_HEADER_BYTES = 16 * 1024 * 1024  # pyarrow's own limit on one page header
VALUE_BYTES = 8  # what one decoded value takes at most (int64, double, an offset pair)
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = range(4)  # PageType in parquet.thrift

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
FIXED = {BYTE: 1, DOUBLE: 8}
VARINTS = {I16, I32, I64}


class BadHeader(ValueError):
    """Bytes that are no Parquet page header."""


class ShortHeader(Exception):
    """The header goes on past the bytes read so far."""


@dataclass(frozen=True)
class PageHeader:
    size: int  # bytes the header itself takes
    uncompressed: int
    compressed: int
    values: int
    kind: int = DATA_PAGE

    def decoded(self, value_bytes: int = VALUE_BYTES) -> int:
        """What the page decodes to at most: its bytes, or its values at ``value_bytes``."""
        return max(self.uncompressed, self.values * value_bytes)


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise ShortHeader
        self.at += 1
        return self.data[self.at - 1]

    def skip(self, count: int) -> None:
        if count < 0:
            raise BadHeader("a negative length")
        if self.at + count > len(self.data):
            raise ShortHeader
        self.at += count

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 70:
                raise BadHeader("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)


def _skip(cursor: _Cursor, kind: int, depth: int = 0) -> None:
    if depth > 32:
        raise BadHeader("nested too deep")
    if kind in (TRUE, FALSE):
        return
    if kind in FIXED:
        cursor.skip(FIXED[kind])
    elif kind in VARINTS:
        cursor.varint()
    elif kind == BINARY:
        cursor.skip(cursor.varint())
    elif kind in (LIST, SET):
        head = cursor.byte()
        count = cursor.varint() if head >> 4 == 15 else head >> 4
        for _ in range(count):
            _skip(cursor, head & 0x0F if head & 0x0F not in (TRUE, FALSE) else BYTE, depth + 1)
    elif kind == MAP:
        count = cursor.varint()
        types = cursor.byte() if count else 0
        for _ in range(count):
            _skip(cursor, types >> 4, depth + 1)
            _skip(cursor, types & 0x0F, depth + 1)
    elif kind == STRUCT:
        _struct(cursor, depth + 1, lambda field, kind: False)
    else:
        raise BadHeader(f"unknown Thrift type {kind}")


def _struct(cursor: _Cursor, depth: int, take: Callable[[int, int], bool]) -> None:
    """Walk one struct; ``take(field, kind)`` reads a field itself and answers True, or
    answers False to have it skipped."""
    field = 0
    while True:
        head = cursor.byte()
        kind = head & 0x0F
        if kind == STOP:
            return
        field = field + (head >> 4) if head >> 4 else cursor.zigzag()
        if not take(field, kind):
            _skip(cursor, kind, depth)


def parse_page_header(data: bytes) -> PageHeader:
    """The page header at the start of ``data``. Raises ShortHeader when ``data`` ends
    inside it, BadHeader when it is no page header."""
    cursor = _Cursor(data)
    found = {"kind": DATA_PAGE, "uncompressed": -1, "compressed": -1, "values": 0}

    def values_of(cursor: _Cursor) -> None:  # num_values is field 1 of every data page
        def take(field: int, kind: int) -> bool:
            if field == 1 and kind == I32:
                found["values"] = max(found["values"], cursor.zigzag())
                return True
            return False

        _struct(cursor, 1, take)

    def take(field: int, kind: int) -> bool:
        if field == 1 and kind == I32:
            found["kind"] = cursor.zigzag()
            return True
        if field in (2, 3) and kind == I32:
            found["uncompressed" if field == 2 else "compressed"] = cursor.zigzag()
            return True
        if field in (5, 7, 8) and kind == STRUCT:  # data page, dictionary page, data page v2
            values_of(cursor)
            return True
        return False

    _struct(cursor, 0, take)
    if found["uncompressed"] < 0 or found["compressed"] < 0:
        raise BadHeader("a page header without its sizes")
    return PageHeader(
        cursor.at, found["uncompressed"], found["compressed"], found["values"], found["kind"]
    )


def read_page_header(fd: int, offset: int) -> PageHeader:
    """The page header at ``offset`` of the file open on ``fd``, read by ``os.pread``."""
    window = HEADER_WINDOW
    while True:
        data = os.pread(fd, window, offset)
        try:
            return parse_page_header(data)
        except ShortHeader:
            if len(data) < window:
                raise BadHeader(f"the file ends inside the page header at {offset}") from None
            if window >= MAX_HEADER_BYTES:
                raise BadHeader(f"the page header at {offset} is over 16 MiB") from None
            window *= 4


def chunk_pages(fd: int, start: int, length: int, pages_left: int) -> Iterator[PageHeader]:
    """The headers of the pages from ``start`` to ``start + length``, in order; more than
    ``pages_left`` of them raise BadHeader."""
    pages = 0
    offset, end = start, start + length
    while offset < end:
        if pages >= pages_left:
            raise BadHeader(f"more than {pages_left} pages to read")
        header = read_page_header(fd, offset)
        yield header
        offset += header.size + max(header.compressed, 0)
        pages += 1


def chunk_decoded_size(fd: int, start: int, length: int, pages_left: int) -> tuple[int, int]:
    """What the pages from ``start`` to ``start + length`` decode to, and the pages counted
    (at most ``pages_left``: a chunk of more pages raises BadHeader)."""
    headers = list(chunk_pages(fd, start, length, pages_left))
    return sum(header.decoded() for header in headers), len(headers)


def pages_for_rows(
    fd: int, start: int, length: int, rows: int | None, pages_left: int
) -> Iterator[PageHeader]:
    """The headers of the pages a decoder reads for a chunk's first ``rows`` rows: the
    dictionary page, the data pages up to the one that holds row ``rows``, and the next.

    ``rows`` None takes every page: a repeated column's ``num_values`` counts values, not
    rows, so its rows can end anywhere (a page header's row count is the writer's word,
    which the decoder does not follow). A flat column's decoder takes exactly ``num_values``
    values from each page, so these headers are the ones it reads."""
    covered, past = 0, False
    for header in chunk_pages(fd, start, length, pages_left):
        yield header
        if rows is None or header.kind not in (DATA_PAGE, DATA_PAGE_V2):
            continue
        if past:
            return
        covered += header.values
        past = covered >= rows
