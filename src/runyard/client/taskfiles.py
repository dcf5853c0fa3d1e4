"""A task's files and runs over ``/api/v1`` (the routes the Studio reads), for both clients.

    client.list_task_files("api-demo")                     # [TaskFile(path, size), ...]
    client.download("api-demo", "report.md", dest="out/")  # Path("out/report.md")
    client.task_runs("api-demo").runs[0].state             # TaskState.SUCCEEDED

A download is streamed in chunks into a hidden temporary file beside its destination and
renamed into place once whole: an interrupted or refused download leaves nothing behind,
and never half a file under the destination's name. ``run_id`` asks for that run's file
only: the server answers 409 when another run is current (a fixed-name rerun replaced
it; only a replaced run's records are kept, not its files).
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

from runyard.client.answers import checked_json
from runyard.client.calls import adapter, unreachable
from runyard.wire import TaskFile, TaskRuns

CHUNK = 1 << 20
LOGIN_CODES = "/api/v1/login/codes"  # a Studio login link's one-time code
TEMP_PREFIX = ".runyard-download-"
Destination = str | os.PathLike[str] | None


def task_path(task_id: str, *rest: str) -> str:
    """``/api/v1/tasks/<task_id>/<rest...>``, the id as one path segment."""
    return "/".join(["/api/v1/tasks", quote(task_id, safe=""), *rest])


def file_path(task_id: str, path: str) -> str:
    """The download route of ``path`` (a name as listed: ``/`` separates folders)."""
    return task_path(task_id, "files", quote(path, safe="/"))


def run_params(run_id: str | None) -> dict[str, str]:
    return {"run_id": run_id} if run_id is not None else {}


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
    route, params = file_path(task_id, path), run_params(run_id)
    try:
        with http.stream("GET", route, params=params) as reply:
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
    route, params = file_path(task_id, path), run_params(run_id)
    try:
        async with http.stream("GET", route, params=params) as reply:
            if reply.status_code != 200:
                await reply.aread()
                checked_json(reply)
            with staged(target) as sink:
                async for chunk in reply.aiter_bytes(CHUNK):
                    await asyncio.to_thread(sink.write, chunk)
    except httpx.TransportError as exc:
        raise unreachable(url, exc) from exc
    return target
