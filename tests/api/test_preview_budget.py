"""Previews of files a task wrote decode within a budget checked before decoding: a Parquet
bomb (a few KB on disk, hundreds of MiB once decompressed) answers 413 at any ``limit``
with the server's memory flat; legitimate files still preview across row groups and with
their columns capped; a text file of one 200 MiB line is answered in ranges, never whole.
Everything against a real server on 127.0.0.1, files written into a task folder as the
task's own code would."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from runyard.api.routes_preview import DECODED_BUDGET, MAX_COLUMNS
from serverproc import ServerProcess, start_server

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

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
    peak_before = peak_rss_mib(server)
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
    peak_before = peak_rss_mib(server)
    for limit in (20, 500):
        message = assert_too_large(preview(server, "liar.parquet", limit=limit), "liar.parquet")
        assert "row groups 0-1" in message and decoded(message) > BOMB_CELL, message
    growth = peak_rss_mib(server) - peak_before
    assert growth < FLAT_MIB, f"peak RSS grew by {growth:.0f} MiB on understated sizes"


def test_run_length_encoding_counts_what_it_decodes_to(server: ServerProcess, folder: Path) -> None:
    """Ten million equal integers take a few bytes of dictionary indices on disk and in
    the footer's sizes, and 80 MB once decoded: the page headers' value counts say so."""
    path = folder / "runs.parquet"
    count = 10_000_000
    pq.write_table(pa.table({"n": pa.repeat(pa.scalar(7, pa.int64()), count)}), path,
                   row_group_size=count)  # fmt: skip
    group = pq.ParquetFile(path).metadata.row_group(0)
    assert group.num_rows == count and group.total_byte_size < DECODED_BUDGET
    assert_too_large(preview(server, "runs.parquet", limit=5), "runs.parquet")


def test_one_huge_cell_in_the_first_group_is_refused(server: ServerProcess, folder: Path) -> None:
    schema = pa.schema([("s", pa.string())])
    data = pa.py_buffer(b"b" * (DECODED_BUDGET + MIB))
    offsets = pa.array([0, DECODED_BUDGET + MIB], pa.int32()).buffers()[1]
    cell = pa.table({"s": pa.StringArray.from_buffers(1, offsets, data)}, schema=schema)
    pq.write_table(cell, folder / "cell.parquet", compression="zstd", use_dictionary=False,
                   write_statistics=False)  # fmt: skip
    peak_before = peak_rss_mib(server)
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
    peak_before = peak_rss_mib(server)
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
