"""What a Parquet column chunk decodes to, as its page headers tell it, without decoding.

The sizes in a file's footer are written by whoever wrote the file and pyarrow does not
hold a reader to them: a footer may claim a 1,000-byte row group whose pages decompress to
80 MiB. The page headers are what the decoder itself obeys (it allocates each page's
``uncompressed_page_size`` and fails on any other length), so a preview sums them, reading
only the headers (Thrift compact protocol) and skipping the page bodies.

Each page counts as the larger of its uncompressed size and ``num_values`` times 8 bytes,
because run-length and delta encodings decode a few bytes into millions of values.

Example::

    size = chunk_decoded_size(fd, start, length, pages_left=100_000)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

HEADER_WINDOW = 64 * 1024  # the first read of a header; grown for headers with statistics
MAX_HEADER_BYTES = 16 * 1024 * 1024  # pyarrow's own limit on one page header
VALUE_BYTES = 8  # what one decoded value takes at most (int64, double, an offset pair)

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
    found = {"uncompressed": -1, "compressed": -1, "values": 0}

    def values_of(cursor: _Cursor) -> None:  # num_values is field 1 of every data page
        def take(field: int, kind: int) -> bool:
            if field == 1 and kind == I32:
                found["values"] = max(found["values"], cursor.zigzag())
                return True
            return False

        _struct(cursor, 1, take)

    def take(field: int, kind: int) -> bool:
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
    return PageHeader(cursor.at, found["uncompressed"], found["compressed"], found["values"])


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


def chunk_decoded_size(fd: int, start: int, length: int, pages_left: int) -> tuple[int, int]:
    """What the pages from ``start`` to ``start + length`` decode to, and the pages counted
    (at most ``pages_left``: a chunk of more pages raises BadHeader)."""
    decoded = pages = 0
    offset, end = start, start + length
    while offset < end:
        if pages >= pages_left:
            raise BadHeader(f"more than {pages_left} pages to read")
        header = read_page_header(fd, offset)
        decoded += max(header.uncompressed, header.values * VALUE_BYTES)
        offset += header.size + max(header.compressed, 0)
        pages += 1
    return decoded, pages
