"""Previews of files a task wrote decode within a budget checked before decoding: a Parquet
bomb (a few KB on disk, hundreds of MiB once decompressed) answers 413 at any ``limit``
with the server's memory flat; legitimate files still preview across row groups and with
their columns capped; a text file of one 200 MiB line is answered in ranges, never whole.
Everything against a real server on 127.0.0.1, files written into a task folder as the
task's own code would."""

from __future__ import annotations

import contextlib
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from runyard.api.preview_cells import ANSWER_CHARS, MAX_CELL_CHARS, cell_chars
from runyard.api.routes_preview import DECODED_BUDGET, MAX_COLUMNS
from serverproc import ServerProcess, start_server

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pc = pytest.importorskip("pyarrow.compute")

MIB = 1024 * 1024
TASK = "etl#seeded#previews"
BOMB_CELL = 80 * MIB  # each bomb row group alone is past the 64 MiB budget
BOMB_GROUPS = 3
FLAT_MIB = 100  # how far the server's peak RSS may grow while it refuses or streams


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("previews"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def folder(server: ServerProcess) -> Path:
    """The task folder, with a small file previewed once so pyarrow is loaded in the server
    before any peak is taken."""
    folder = server.workspace / "etl" / TASK
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"n": [1, 2, 3]}), folder / "small.parquet")
    assert preview(server, "small.parquet").status_code == 200
    return folder


def preview(server: ServerProcess, path: str, **params: int) -> httpx.Response:
    with server.client() as client:
        return client.get(f"/api/v1/tasks/{quote(TASK, safe='')}/preview/{path}", params=params)


def peak_rss_mib(server: ServerProcess) -> float:
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def reset_peak_rss(server: ServerProcess) -> float:
    """The server's peak RSS, reset to its current RSS first where the kernel lets us
    (clear_refs 5), so that an earlier test's peak does not hide this one's."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")
    return peak_rss_mib(server)


def write_bomb(path: Path) -> None:
    """A 1-row first row group, then BOMB_GROUPS groups of one BOMB_CELL string of 'a' each
    (zstd: a few KB on disk). The cell is built once from a buffer, no Python string."""
    schema = pa.schema([("s", pa.string())])
    data = pa.py_buffer(b"a" * BOMB_CELL)
    offsets = pa.array([0, BOMB_CELL], pa.int32()).buffers()[1]
    cell = pa.table({"s": pa.StringArray.from_buffers(1, offsets, data)}, schema=schema)
    options = {"compression": "zstd", "use_dictionary": False, "write_statistics": False}
    with pq.ParquetWriter(path, schema, **options) as writer:
        writer.write_table(pa.table({"s": ["first"]}, schema=schema))
        for _ in range(BOMB_GROUPS):
            writer.write_table(cell)


def assert_too_large(reply: httpx.Response, name: str) -> str:
    assert reply.status_code == 413, reply.text[:300]
    error = reply.json()["error"]
    assert error["code"] == "too_large"
    message: str = error["message"]
    assert name in message and f"budget is {DECODED_BUDGET} bytes" in message, message
    return message


def decoded(message: str) -> int:
    found = re.search(r": (\d+) bytes once decoded", message)
    assert found, message
    return int(found.group(1))


def test_a_parquet_bomb_is_refused_before_decoding(server: ServerProcess, folder: Path) -> None:
    write_bomb(folder / "bomb.parquet")
    assert (folder / "bomb.parquet").stat().st_size < 64 * 1024
    peak_before = reset_peak_rss(server)
    for limit in (20, 500, 2):
        message = assert_too_large(preview(server, "bomb.parquet", limit=limit), "bomb.parquet")
        # the first two groups already pass it: 1 row, then one 80 MiB cell
        assert "row groups 0-1" in message and decoded(message) > BOMB_CELL, message
    growth = peak_rss_mib(server) - peak_before
    assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB refusing a Parquet bomb"
    first = preview(server, "bomb.parquet", limit=1)  # the rows within the budget still show
    assert first.status_code == 200, first.text
    assert first.json()["rows"] == [["first"]]
    assert first.json()["total_rows"] == 1 + BOMB_GROUPS


def varint(value: int, width: int = 0) -> bytes:
    """``value`` as a Thrift varint, padded to ``width`` bytes with continuation bits (a
    decoder takes the longer form as the same number)."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
        out[-1] |= 0x80
    while len(out) < width:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def understate_sizes(path: Path, real: int, claimed: int) -> None:
    """Rewrite the footer so every size field that said ``real`` says ``claimed``, in place
    (same length): the row groups' totals and their column chunks' uncompressed sizes."""
    data = bytearray(path.read_bytes())
    footer_at = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    honest = varint(real << 1)  # zigzag of a positive i64
    footer = bytes(data[footer_at:-8])
    assert footer.count(honest) >= 2, "no size fields found to rewrite"
    data[footer_at:-8] = footer.replace(honest, varint(claimed << 1, len(honest)))
    path.write_bytes(bytes(data))


def test_a_bomb_whose_footer_understates_its_sizes_is_refused(
    server: ServerProcess, folder: Path
) -> None:
    """The footer's sizes are the writer's word: the page headers, which the decoder obeys,
    are read before anything is decoded."""
    path = folder / "liar.parquet"
    write_bomb(path)
    real = pq.ParquetFile(path).metadata.row_group(1).total_byte_size
    understate_sizes(path, real, 1000)
    group = pq.ParquetFile(path).metadata.row_group(1)
    assert group.total_byte_size == group.column(0).total_uncompressed_size == 1000
    peak_before = reset_peak_rss(server)
    for limit in (20, 500):
        message = assert_too_large(preview(server, "liar.parquet", limit=limit), "liar.parquet")
        assert "row groups 0-1" in message and decoded(message) > BOMB_CELL, message
    growth = peak_rss_mib(server) - peak_before
    assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB on understated sizes"


def test_run_length_encoding_counts_what_it_decodes_to(server: ServerProcess, folder: Path) -> None:
    """Ten million equal integers take a few bytes of dictionary indices on disk and in
    the footer's sizes, and 80 MB once decoded: the page headers' value counts say so. In
    pages of 20,000 rows (pyarrow's default) the first rows are one small page; in one page
    of ten million values, that page is what the decoder takes, and it is refused."""
    count = 10_000_000
    table = pa.table({"n": pa.repeat(pa.scalar(7, pa.int64()), count)})
    pq.write_table(table, folder / "runs.parquet", row_group_size=count)
    pq.write_table(table, folder / "onepage.parquet", row_group_size=count,
                   max_rows_per_page=count)  # fmt: skip
    group = pq.ParquetFile(folder / "onepage.parquet").metadata.row_group(0)
    assert group.num_rows == count and group.total_byte_size < DECODED_BUDGET
    peak_before = reset_peak_rss(server)
    message = assert_too_large(preview(server, "onepage.parquet", limit=5), "onepage.parquet")
    assert decoded(message) >= 8 * count, message
    paged = preview(server, "runs.parquet", limit=5)
    assert paged.status_code == 200, paged.text[:300]
    assert paged.json()["rows"] == [[7]] * 5 and paged.json()["total_rows"] == count
    assert peak_rss_mib(server) - peak_before < FLAT_MIB


def test_one_huge_cell_in_the_first_group_is_refused(server: ServerProcess, folder: Path) -> None:
    schema = pa.schema([("s", pa.string())])
    data = pa.py_buffer(b"b" * (DECODED_BUDGET + MIB))
    offsets = pa.array([0, DECODED_BUDGET + MIB], pa.int32()).buffers()[1]
    cell = pa.table({"s": pa.StringArray.from_buffers(1, offsets, data)}, schema=schema)
    pq.write_table(cell, folder / "cell.parquet", compression="zstd", use_dictionary=False,
                   write_statistics=False)  # fmt: skip
    peak_before = reset_peak_rss(server)
    message = assert_too_large(preview(server, "cell.parquet", limit=1), "cell.parquet")
    assert "row groups 0-0" in message, message
    assert peak_rss_mib(server) - peak_before < FLAT_MIB


def test_a_footer_claiming_more_than_the_budget_is_refused(
    server: ServerProcess, folder: Path
) -> None:
    footer = struct.pack("<I4s", DECODED_BUDGET + 1, b"PAR1")
    (folder / "footer.parquet").write_bytes(b"PAR1" + b"\0" * 64 + footer)
    message = assert_too_large(preview(server, "footer.parquet"), "footer.parquet")
    assert "its metadata" in message and decoded(message) == DECODED_BUDGET + 1, message
    (folder / "tail.parquet").write_bytes(b"PAR1" + b"\0" * 64 + b"\0\0\0\0NOPE")
    tail = preview(server, "tail.parquet")
    assert tail.status_code == 422 and tail.json()["error"]["code"] == "not_parquet", tail.text


def test_rows_are_read_across_row_groups(server: ServerProcess, folder: Path) -> None:
    table = pa.table({"n": list(range(35)), "label": [f"row {i}" for i in range(35)]})
    pq.write_table(table, folder / "groups.parquet", row_group_size=7)
    assert pq.ParquetFile(folder / "groups.parquet").metadata.num_row_groups == 5
    reply = preview(server, "groups.parquet", limit=20)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["rows"] == [[i, f"row {i}"] for i in range(20)]
    assert body["total_rows"] == 35
    assert body["truncated"] == {"rows": True, "columns": False}
    whole = preview(server, "groups.parquet", limit=500).json()
    assert whole["rows"] == [[i, f"row {i}"] for i in range(35)]
    assert whole["truncated"] == {"rows": False, "columns": False}
    assert preview(server, "groups.parquet", limit=501).status_code == 422


def test_a_wide_file_shows_the_first_columns_and_says_so(
    server: ServerProcess, folder: Path
) -> None:
    width = 10_000
    table = pa.table({f"c{i}": [i, i + 1] for i in range(width)})
    pq.write_table(table, folder / "wide.parquet")
    reply = preview(server, "wide.parquet", limit=5)
    assert reply.status_code == 200, reply.text[:300]
    body = reply.json()
    assert [c["name"] for c in body["columns"]] == [f"c{i}" for i in range(MAX_COLUMNS)]
    assert body["rows"] == [list(range(MAX_COLUMNS)), list(range(1, MAX_COLUMNS + 1))]
    assert body["truncated"] == {"rows": False, "columns": True}


@pytest.mark.parametrize("name", ["line.csv", "line.jsonl"])
def test_a_single_200_mib_line_is_answered_in_bounded_ranges(
    server: ServerProcess, folder: Path, name: str
) -> None:
    """The server never parses text files: the Studio asks for a byte range and reads at
    most its cap, whatever the lines. One 200 MiB line (written in chunks, not sparse)."""
    size = 200 * MIB
    chunk = (b'{"k": "' if name.endswith("jsonl") else b"a,").ljust(MIB, b"x")
    with (folder / name).open("wb") as out:
        for _ in range(size // MIB):
            out.write(chunk)
    url = f"/api/v1/tasks/{quote(TASK, safe='')}/files/{name}"
    peak_before = reset_peak_rss(server)
    with server.client() as client:
        part = client.get(url, headers={"range": f"bytes=0-{MIB - 1}"})
        assert part.status_code == 206 and len(part.content) == MIB
        assert part.headers["content-range"] == f"bytes 0-{MIB - 1}/{size}"
        with client.stream("GET", url) as whole:
            assert sum(len(block) for block in whole.iter_bytes()) == size
    growth = peak_rss_mib(server) - peak_before
    assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB serving a {size // MIB} MiB line"
    reply = preview(server, name)
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "not_parquet"


def write_dictionary_bomb(path: Path, entry: int, rows: int = 1000) -> None:
    """One string column of ``rows`` rows that all point at the single entry of its
    dictionary, ``entry`` bytes of 'd' (zstd: about a kilobyte on disk). Written without
    Arrow's schema, so it reads back as a plain string column, as any writer's would."""
    data = pa.py_buffer(b"d" * entry)
    offsets = pa.array([0, entry], pa.int32()).buffers()[1]
    dictionary = pa.StringArray.from_buffers(1, offsets, data)
    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), dictionary)
    pq.write_table(pa.table({"s": column, "n": list(range(rows))}), path, compression="zstd",
                   store_schema=False)  # fmt: skip


@pytest.mark.parametrize("entry_mib", [2, 32])
def test_a_dictionary_bomb_is_read_once_and_cut(
    server: ServerProcess, folder: Path, entry_mib: int
) -> None:
    """Every row points at one large dictionary entry: expanded per row, 500 rows of it are
    gigabytes, while the pages stay a kilobyte. The entry is read once, as a dictionary,
    and cut to the cell's cap; a 32 MiB one is past what reading it once holds (the reader
    keeps four copies of a dictionary page) and refused."""
    name = f"dictionary{entry_mib}.parquet"
    write_dictionary_bomb(folder / name, entry_mib * MIB)
    meta = pq.ParquetFile(folder / name).metadata
    assert meta.row_group(0).column(0).has_dictionary_page
    assert (folder / name).stat().st_size < 64 * 1024
    assert str(pq.ParquetFile(folder / name).schema_arrow.field("s").type) == "string"
    peak_before = reset_peak_rss(server)
    reply = preview(server, name, limit=500)
    growth = peak_rss_mib(server) - peak_before
    assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB on a dictionary bomb"
    if entry_mib == 32:
        message = assert_too_large(reply, name)
        assert "column 's' in row groups 0-0" in message and decoded(message) > 4 * 32 * MIB
        return
    assert reply.status_code == 200, reply.text[:300]
    body = reply.json()
    assert body["columns"] == [{"name": "s", "type": "string"}, {"name": "n", "type": "int64"}]
    assert len(body["rows"]) == 500 and body["total_rows"] == 1000
    assert body["rows"][0] == [f"{'d' * MAX_CELL_CHARS}…", 0]
    assert body["rows"][499] == [f"{'d' * MAX_CELL_CHARS}…", 499]


def test_a_list_bomb_is_refused_or_cut(server: ServerProcess, folder: Path) -> None:
    """A list column whose one row holds ten million integers (a few KB of run-length
    indices) is refused: a repeated column's rows can end anywhere, so its whole chunk
    counts. Lists of 600,000 integers within the budget show their first 100 items."""
    count = 10_000_000
    one = pa.ListArray.from_arrays(pa.array([0, count], pa.int32()),
                                   pa.repeat(pa.scalar(7, pa.int64()), count))  # fmt: skip
    pq.write_table(pa.table({"l": one}), folder / "list.parquet", compression="zstd")
    assert (folder / "list.parquet").stat().st_size < 1024 * 1024
    peak_before = reset_peak_rss(server)
    message = assert_too_large(preview(server, "list.parquet", limit=500), "list.parquet")
    assert "column 'l'" in message, message
    rows, width = 5, 600_000
    values = pa.array([i % 1000 + 1000 for i in range(rows * width)], pa.int32())
    offsets = pa.array(range(0, rows * width + 1, width), pa.int32())
    lists = pa.table({"l": pa.ListArray.from_arrays(offsets, values), "n": range(rows)})
    pq.write_table(lists, folder / "lists.parquet", compression="zstd")
    reply = preview(server, "lists.parquet", limit=500)
    growth = peak_rss_mib(server) - peak_before
    assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB on a list bomb"
    assert reply.status_code == 200, reply.text[:300]
    cells = [row[0] for row in reply.json()["rows"]]
    assert [row[1] for row in reply.json()["rows"]] == list(range(rows))
    assert all(len(cell) <= MAX_CELL_CHARS + 1 and cell.endswith("…") for cell in cells)
    assert cells[1].startswith("[1000, 1001, 1002, ")


def test_a_large_row_group_previews_only_the_pages_its_first_rows_need(
    server: ServerProcess, folder: Path
) -> None:
    """pyarrow's defaults: one row group of a million rows, ten float64 columns, 80 MB
    decoded, past the budget as a whole; and one column of ten million in one row group,
    80 MB in one chunk. Twenty rows need a few pages of each column."""
    sines = {
        "large.parquet": {f"c{i}": sine(1_000_000, i) for i in range(10)},
        "tall.parquet": {"x": sine(10_000_000, 0)},
    }
    for name, columns in sines.items():
        table = pa.table(columns)
        pq.write_table(table, folder / name, row_group_size=table.num_rows)
        group = pq.ParquetFile(folder / name).metadata.row_group(0)
        assert group.num_rows == table.num_rows and group.total_byte_size > 80_000_000
        expected = [list(row.values()) for row in table.slice(0, 20).to_pylist()]
        peak_before = reset_peak_rss(server)
        reply = preview(server, name, limit=20)
        growth = peak_rss_mib(server) - peak_before
        assert reply.status_code == 200, reply.text[:300]
        assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB on 20 rows of {name}"
        assert reply.json()["rows"] == expected
        assert reply.json()["truncated"]["rows"]


def sine(count: int, shift: int) -> pa.Array:
    """``count`` float64 values that do not compress: sin(row + shift)."""
    return pc.sin(pc.add(pa.array(range(count), pa.float64()), float(shift)))


def test_columns_are_read_by_their_own_leaves(server: ServerProcess, folder: Path) -> None:
    """A column named "a.b" beside a struct "a" with a field "b", and nested types: pyarrow
    finds columns by dotted paths, which cannot tell the first two apart."""
    table = pa.table({
        "a": [{"b": "in a struct"}, None],
        "a.b": ["flat", "flat too"],
        "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
        "l": [[["x"], []], [None]],
    })  # fmt: skip
    pq.write_table(table, folder / "dotted.parquet")
    reply = preview(server, "dotted.parquet")
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["rows"] == [
        ["{'b': 'in a struct'}", "flat", "[('k', 1)]", "[['x'], []]"],
        [None, "flat too", "[]", "[None]"],
    ]


def test_a_wide_answer_shares_its_characters_among_its_cells(
    server: ServerProcess, folder: Path
) -> None:
    """500 rows of 200 columns of one 2,000-character string each: 200 MB of text if every
    cell showed its 500 characters' worth in full; the answer stays within its share."""
    rows, width = 500, MAX_COLUMNS
    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                            pa.array(["w" * 2000]))  # fmt: skip
    pq.write_table(pa.table({f"c{i}": column for i in range(width)}), folder / "text.parquet",
                   store_schema=False)  # fmt: skip
    peak_before = reset_peak_rss(server)
    reply = preview(server, "text.parquet", limit=rows)
    assert reply.status_code == 200, reply.text[:300]
    chars = cell_chars(rows, width)
    assert chars < MAX_CELL_CHARS
    assert {cell for row in reply.json()["rows"] for cell in row} == {"w" * chars + "…"}
    assert len(reply.content) < ANSWER_CHARS * 1.5
    assert peak_rss_mib(server) - peak_before < FLAT_MIB
