"""The clients download a task's files, list them, and read its runs typed, against a real
server: streamed to disk, whole or not at all, only the run asked for."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.client import AsyncClient, Client
from runyard.client.taskfiles import TEMP_PREFIX
from runyard.errors import HTTPError, NotFound, ServerUnreachable
from runyard.wire import TaskFile, TaskRunEntry, TaskRuns, TaskState
from serverproc import ServerProcess, start_server
from tcpproxy import Proxy

BIG = 3 * 1024 * 1024 + 17  # several chunks, and not a multiple of one


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("task-files"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def made(srv: ServerProcess) -> str:
    """A finished task with a report, a nested file and a big binary one."""
    command = (
        "sh -c 'echo hello > report.md; mkdir -p plots; printf png > plots/roc.png; "
        f"head -c {BIG} /dev/urandom > big.bin'"
    )
    with Client(srv.url, srv.token) as client:
        handle = client.submit("command", name="files", command=command)
        assert client.wait(handle, timeout=60).state == "succeeded"
    return handle.task_id


def on_disk(srv: ServerProcess, task_id: str, path: str) -> bytes:
    return (srv.workspace / task_id.split("#")[0] / task_id / path).read_bytes()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(TEMP_PREFIX))


def test_download_streams_a_file_whole(srv: ServerProcess, made: str, tmp_path: Path) -> None:
    with Client(srv.url, srv.token) as client:
        saved = client.download(made, "big.bin", dest=tmp_path)
        named = client.download(made, "plots/roc.png", dest=tmp_path / "chart.png")
    assert saved == tmp_path / "big.bin" and named == tmp_path / "chart.png"
    expected = hashlib.sha256(on_disk(srv, made, "big.bin")).hexdigest()
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == expected
    assert named.read_bytes() == b"png" and leftovers(tmp_path) == []


def test_download_by_name_into_the_current_folder(
    srv: ServerProcess, made: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with Client(srv.url, srv.token) as client:
        saved = client.download("files", "report.md")  # the task's name is enough
    assert saved == Path("report.md") and (tmp_path / "report.md").read_text() == "hello\n"


def test_the_listing_is_typed(srv: ServerProcess, made: str) -> None:
    with Client(srv.url, srv.token) as client:
        files = {f.path: f for f in client.list_task_files(made)}
    assert all(isinstance(f, TaskFile) for f in files.values())
    assert files["big.bin"].size == BIG and files["plots/roc.png"].size == 3
    assert not any(name.startswith(".") for name in files)  # hidden names are never served


def test_refusals_leave_nothing_behind(srv: ServerProcess, made: str, tmp_path: Path) -> None:
    target = tmp_path / "kept.txt"
    target.write_text("mine")  # a refused download must not touch it
    with Client(srv.url, srv.token) as client:
        with pytest.raises(NotFound, match="without writing it"):
            client.download(made, "absent.md", dest=target)
        with pytest.raises(HTTPError) as escaped:
            client.download(made, "../../server.json", dest=target)
        assert 400 <= escaped.value.status_code < 500
        with pytest.raises(ValueError, match="names no file"):
            client.download(made, "plots/..", dest=tmp_path)
    assert target.read_text() == "mine" and leftovers(tmp_path) == []


def test_a_run_id_gets_that_runs_file_after_a_rerun(srv: ServerProcess, tmp_path: Path) -> None:
    with Client(srv.url, srv.token) as client:
        first = client.submit("command", name="rerun", command="sh -c 'echo one > out.txt'")
        assert client.wait(first, timeout=60).state == "succeeded"
        saved = client.download(first.task_id, "out.txt", run_id=first.run_id, dest=tmp_path)
        assert saved.read_text() == "one\n"
        second = client.submit("command", name="rerun", command="sh -c 'echo two > out.txt'")
        assert client.wait(second, timeout=60).state == "succeeded"
        again = client.download(
            first.task_id, "out.txt", run_id=first.run_id, dest=tmp_path / "again.txt"
        )
        now = client.download(first.task_id, "out.txt", dest=tmp_path / "now.txt")
        runs = client.task_runs(first.task_id)
        kept = client.task_run(first.task_id, first.run_id)
        with pytest.raises(NotFound):
            client.task_run(first.task_id, "0" * 32)
        with pytest.raises(NotFound):
            client.download(first.task_id, "out.txt", run_id="0" * 32, dest=tmp_path)
    assert again.read_text() == "one\n" and now.read_text() == "two\n"
    assert kept.current is False and kept.state is TaskState.SUCCEEDED
    assert {f.path: f.size for f in kept.files}["out.txt"] == 4
    assert isinstance(runs, TaskRuns) and all(isinstance(r, TaskRunEntry) for r in runs.runs)
    assert [(r.run_id, r.current) for r in runs.runs] == [
        (second.run_id, True),
        (first.run_id, False),
    ]
    assert runs.runs[0].state is TaskState.SUCCEEDED and runs.runs[0].exit_code == 0
    assert leftovers(tmp_path) == []


def test_a_running_tasks_file_is_not_written_yet(srv: ServerProcess, tmp_path: Path) -> None:
    with Client(srv.url, srv.token) as client:
        handle = client.submit("command", command="sleep 60")
        try:
            with pytest.raises(NotFound, match="not written yet"):
                client.download(handle.task_id, "later.txt", dest=tmp_path)
        finally:
            client.cancel(handle.task_id)
    assert list(tmp_path.iterdir()) == []


def test_the_async_client_does_the_same(srv: ServerProcess, made: str, tmp_path: Path) -> None:
    async def scenario() -> tuple[Path, TaskRuns, list[TaskFile], int, dict[str, object]]:
        async with AsyncClient(srv.url, srv.token) as client:
            saved = await client.download(made, "big.bin", dest=tmp_path)
            runs = await client.task_runs(made)
            files = await client.list_task_files(made)
            page = await client.task_page(limit=1, task="command")
            report = await client.collect_garbage(dry_run=True)
            with pytest.raises(NotFound):
                await client.download(made, "absent.md", dest=tmp_path)
            return saved, runs, files, len(page), report

    saved, runs, files, listed, report = asyncio.run(scenario())
    assert saved.read_bytes() == on_disk(srv, made, "big.bin")
    assert runs.task_id == made and runs.runs[0].current
    assert {f.path for f in files} >= {"big.bin", "report.md", "plots/roc.png"}
    assert listed == 1 and report["dry_run"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]


def test_login_codes(srv: ServerProcess) -> None:
    async def minted() -> dict[str, object]:
        async with AsyncClient(srv.url, srv.token) as client:
            return await client.login_code()

    with Client(srv.url, srv.token) as client:
        first = client.login_code()
    second = asyncio.run(minted())
    assert isinstance(first["code"], str) and first["code"] != second["code"]
    assert float(first["expiresInSeconds"]) > 0  # type: ignore[arg-type]


def test_a_download_cut_off_midway_leaves_nothing(
    srv: ServerProcess, made: str, tmp_path: Path
) -> None:
    target = tmp_path / "big.bin"
    target.write_bytes(b"the copy from before")
    proxy = Proxy(int(srv.url.rsplit(":", 1)[1]), cut_first_after=BIG // 2)
    try:
        with Client(proxy.url, srv.token) as client, pytest.raises(ServerUnreachable):
            client.download(made, "big.bin", dest=target)
    finally:
        proxy.close_all()
    assert target.read_bytes() == b"the copy from before" and leftovers(tmp_path) == []
