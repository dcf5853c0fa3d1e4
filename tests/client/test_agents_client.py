"""The agents client against a real server: sessions, a streamed upload, runs, waits with a
timeout, answers and files."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import pytest

from runyard.client import AsyncClient, Client
from runyard.errors import HTTPError, NotFound, WaitTimeout
from serverproc import start_server

SIZE = 6 * 1024 * 1024


class RecordingFile(io.RawIOBase):
    """A binary file that remembers how much each read asked for."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb")  # noqa: SIM115
        self.name = str(path)
        self.asked: list[int] = []

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.asked.append(size if size is not None else -1)
        return self._file.read(size)

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        self.asked.append(len(buffer))
        return self._file.readinto(buffer)

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        self._file.close()
        super().close()


def test_agents_client(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", config={"agent_sandbox": "none"})
    try:
        with Client(server.url, server.token) as client:
            run_through(client.agents, tmp_path)
        asyncio.run(run_async(server.url, server.token, tmp_path))
    finally:
        server.stop()


def run_through(agents, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    session = agents.create_session("client")
    assert session.status == "OPEN" and session.id in [s.id for s in agents.list_sessions()]

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(SIZE))
    recorded = RecordingFile(big)
    artifact = agents.upload(session, recorded, relative_path="data/big.bin")
    recorded.close()
    assert (artifact.size, artifact.relative_path) == (SIZE, "data/big.bin")
    # streamed: many bounded reads, never one read of the whole file
    assert recorded.asked and all(0 < size <= 1 << 20 for size in recorded.asked)
    small = agents.upload(session.id, big.parent / "big.bin", relative_path="again.bin")
    assert {a.id for a in agents.list_artifacts(session)} == {artifact.id, small.id}

    run = agents.create_run(session, "Summarise the inputs")
    with pytest.raises(WaitTimeout, match="still running"):
        agents.wait_run(run, timeout=0)
    done = agents.wait_run(run.id, timeout=120)
    assert done.state == "succeeded" and done.terminal, done.error
    answer = agents.answer(done)
    assert answer and answer.strip()
    paths = {f.path for f in agents.list_files(done)}
    assert "final-answer.md" in paths
    sink = io.BytesIO()
    assert agents.download(done, "final-answer.md", to=sink) == b""
    assert sink.getvalue().decode() == answer
    agents.download(done, "final-answer.md", to=tmp_path / "answer.md")
    assert (tmp_path / "answer.md").read_text() == answer
    with pytest.raises(NotFound):
        agents.download(done, "no-such-file.txt")

    queued = agents.create_run(session, "never mind")
    agents.cancel_run(queued)
    stopped = agents.wait_run(queued, timeout=60)
    assert stopped.state == "cancelled"
    assert agents.answer(stopped) is None
    assert [r.id for r in agents.iter_runs(session)] == [queued.id, run.id]

    with pytest.raises(NotFound):
        agents.get_run("run_does_not_exist")
    assert agents.close_session(session).status == "CLOSED"
    with pytest.raises(HTTPError) as refused:
        agents.create_run(session, "closed")
    assert refused.value.status_code >= 400 and "Traceback" not in str(refused.value)
    assert agents.get_session(session).status == "CLOSED"


async def run_async(url: str, token: str | None, tmp_path: Path) -> None:
    async with AsyncClient(url, token) as client:
        agents = client.agents
        session = await agents.create_session("async")
        recorded = RecordingFile(tmp_path / "big.bin")
        artifact = await agents.upload(session, recorded)
        recorded.close()
        assert artifact.size == SIZE and artifact.file_name == "big.bin"
        assert recorded.asked and all(0 < size <= 1 << 20 for size in recorded.asked)
        run = await agents.create_run(session, "again, async")
        with pytest.raises(WaitTimeout):
            await agents.wait_run(run, timeout=0)
        done = await agents.wait_run(run, timeout=120)
        assert done.state == "succeeded", done.error
        answer = await agents.answer(done)
        assert answer and "final-answer.md" in {f.path for f in await agents.list_files(done)}
        sink = io.BytesIO()
        await agents.download(done, "final-answer.md", to=sink)
        assert sink.getvalue().decode() == answer
        assert [r.id async for r in agents.iter_runs(session)] == [run.id]
        assert (await agents.close_session(session)).status == "CLOSED"
