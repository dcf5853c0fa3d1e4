"""A task's files and runs over ``/api/v1`` (the routes the Studio reads), for both clients.

    client.list_task_files("api-demo")                     # [TaskFile(path, size), ...]
    client.download("api-demo", "report.md", dest="out/")  # Path("out/report.md")
    client.task_runs("api-demo").runs[0].state             # TaskState.SUCCEEDED
    client.task_run("api-demo", run_id).files              # [RunFile(path, size, sha256)]
    client.download("api-demo", "model.bin", run_id=run_id)  # an earlier run's file

A download is streamed in chunks into a hidden temporary file beside its destination and
renamed into place once whole: an interrupted or refused download leaves nothing behind,
and never half a file under the destination's name. ``run_id`` asks for that run's file,
the current run's or an earlier one a fixed-name rerun or a retry replaced (every run is
kept whole: ``GET /api/v1/tasks/{id}/runs/{run_id}/files/{path}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field

from runyard.client.answers import checked_json
from runyard.client.calls import adapter, unreachable
from runyard.wire import TaskFile, TaskRunEntry, TaskRuns

CHUNK = 1 << 20
LOGIN_CODES = "/api/v1/login/codes"  # a Studio login link's one-time code
TEMP_PREFIX = ".runyard-download-"
Destination = str | os.PathLike[str] | None


def task_path(task_id: str, *rest: str) -> str:
    """``/api/v1/tasks/<task_id>/<rest...>``, the id as one path segment."""
    return "/".join(["/api/v1/tasks", quote(task_id, safe=""), *rest])


def file_path(task_id: str, path: str, run_id: str | None = None) -> str:
    """The download route of ``path`` (a name as listed: ``/`` separates folders), of run
    ``run_id`` when given."""
    if run_id is None:
        return task_path(task_id, "files", quote(path, safe="/"))
    return task_path(task_id, "runs", quote(run_id, safe=""), "files", quote(path, safe="/"))


def run_path(task_id: str, run_id: str) -> str:
    return task_path(task_id, "runs", quote(run_id, safe=""))


class RunFile(BaseModel):
    """A file of one run: ``path`` as a download takes it, ``size``, and ``sha256`` (null
    for a large file of the current run, which is not hashed on each request)."""

    path: str
    size: int
    sha256: str | None = None


class TaskRunDetail(TaskRunEntry):
    """One run (``GET /api/v1/tasks/{id}/runs/{run_id}``): its status fields, inputs,
    params (inputs with the logged ones), metric summaries, result and files."""

    task_id: str
    config: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    files: list[RunFile] = Field(default_factory=list)


def run_answer(body: dict[str, Any]) -> TaskRunDetail:
    return TaskRunDetail.model_validate(body)


def files_answer(body: dict[str, Any]) -> list[TaskFile]:
    return adapter(list[TaskFile]).validate_python(body["items"])


def runs_answer(body: dict[str, Any]) -> TaskRuns:
    return TaskRuns.model_validate(body)


def target_of(path: str, dest: Destination) -> Path:
    """Where ``path`` is saved: ``dest`` itself, or ``dest/<file name>`` when ``dest`` is
    a folder (or ends with ``/``), or ``./<file name>`` without ``dest``."""
    name = PurePosixPath(path).name
    if dest is None or os.fspath(dest).endswith(os.sep) or Path(dest).is_dir():
        if name in ("", ".", ".."):
            raise ValueError(f"{path!r} names no file to save; pass dest= a file path")
        return Path(dest or ".") / name
    return Path(dest)


@contextlib.contextmanager
def staged(target: Path) -> Iterator[IO[bytes]]:
    """A temporary file beside ``target``, renamed onto it when the block ends without an
    error (and removed when it raises)."""
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as sink:
            yield sink
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def download(
    http: httpx.Client, url: str, task_id: str, path: str, run_id: str | None,
    dest: Destination,
) -> Path:  # fmt: skip
    """The synchronous download (see the module docstring); answers the path written."""
    target = target_of(path, dest)
    route = file_path(task_id, path, run_id)
    try:
        with http.stream("GET", route) as reply:
            if reply.status_code != 200:
                reply.read()
                checked_json(reply)  # raises the answer's error
            with staged(target) as sink:
                for chunk in reply.iter_bytes(CHUNK):
                    sink.write(chunk)
    except httpx.TransportError as exc:
        raise unreachable(url, exc) from exc
    return target


async def download_async(
    http: httpx.AsyncClient, url: str, task_id: str, path: str, run_id: str | None,
    dest: Destination,
) -> Path:  # fmt: skip
    """:func:`download` as a coroutine; the file is written off the event loop."""
    target = target_of(path, dest)
    route = file_path(task_id, path, run_id)
    try:
        async with http.stream("GET", route) as reply:
            if reply.status_code != 200:
                await reply.aread()
                checked_json(reply)
            with staged(target) as sink:
                async for chunk in reply.aiter_bytes(CHUNK):
                    await asyncio.to_thread(sink.write, chunk)
    except httpx.TransportError as exc:
        raise unreachable(url, exc) from exc
    return target
