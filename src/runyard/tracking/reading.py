"""Reading a run's metrics and params back, on the server's side.

``metrics.jsonl`` and ``params.json`` lie in a task folder that the task's own (sandboxed)
code can write: for the server they are untrusted. Every read here therefore

* opens the file with :func:`runyard.workspace.safefs.open_under` (a symlink, or a hard
  link to another file, is refused and reads as no file);
* reads at most ``max_bytes`` (a line cut by the cap is dropped), in chunks, so a huge
  file cannot exhaust the server's memory;
* skips every line that is not a valid point (too long, not JSON, a bad name or value)
  instead of failing the request.

::

    points = read_points(run_dir, name="loss")
    summary = summarise(points)["loss"]          # {"last", "min", "max", "step", "count"}
    chart = series(points, max_points=500)["loss"]   # {"steps", "values", "times"}
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from runyard.errors import InvalidInput, NoSuchFile, UnsafePath
from runyard.tracking.points import (
    METRICS_FILE,
    PARAMS_FILE,
    STEP_MAX,
    STEP_MIN,
    Point,
    check_metric_name,
    metric_summary,
    param_value,
    parse_point,
    wire_value,
)
from runyard.wire import TaskStatus
from runyard.workspace.safefs import open_under

# 64 MiB: a million points or more (a point's line is 50-100 bytes), about 150 bytes of
# memory each once read; a forged file of tiny lines cannot make a reader hold more
MAX_METRICS_BYTES = 64 * 1024 * 1024
MAX_PARAMS_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024  # a point is under 400 bytes; a longer line is no point
CHUNK_BYTES = 1024 * 1024
_DECODE = json.JSONDecoder().decode
INPUT_ONLY = ("task_name", "source_tasks")  # inputs every task has: no params


def read_points(
    run_dir: Path, *, name: str | None = None, max_bytes: int = MAX_METRICS_BYTES
) -> list[Point]:
    """The valid points of ``run_dir/metrics.jsonl`` in file order (only metric ``name``'s
    when given); ``[]`` when the file is missing or not a plain regular file."""
    needle = json.dumps(name).encode() if name is not None else None
    reader = _PointReader()
    for line in _lines(run_dir, METRICS_FILE, max_bytes):
        if needle is not None and needle not in line:
            continue  # cheaper than parsing every line of the other metrics
        reader.take(line)
    if name is None:
        return reader.points
    return [point for point in reader.points if point.name == name]


def metrics_bytes(run_dir: Path) -> int:
    """The size of ``run_dir/metrics.jsonl`` (0 when missing or not a plain regular file),
    read as :func:`read_points` reads it."""
    try:
        opened = open_under(run_dir, METRICS_FILE, hidden=True, single_link=True)
    except (NoSuchFile, UnsafePath, OSError):
        return 0
    with opened:
        return os.fstat(opened.fd).st_size


class _PointReader:
    """Lines to points, fast for what the worker writes: each line is decoded on its own
    (one JSON value a line, nothing after it), and a point whose fields are plainly valid
    (a name seen valid before, an int step, a float value and time) is taken without the
    full check; every other object goes through :func:`parse_point`."""

    def __init__(self) -> None:
        self.points: list[Point] = []
        self._names: dict[str, str] = {}  # valid names, one string a metric

    def take(self, line: bytes) -> None:
        """Keep the point ``line`` holds, if it holds a valid one."""
        obj = _loaded(line)
        point = self._plain(obj) if type(obj) is dict and len(obj) == 4 else None
        if point is None:
            point = _checked(obj)
            if point is not None:
                point = Point(self._names.setdefault(point.name, point.name),
                              point.step, point.value, point.time)
        if point is not None:
            self.points.append(point)

    def _plain(self, obj: dict[str, Any]) -> Point | None:
        raw = obj.get("name")
        name = self._names.get(raw) if type(raw) is str else None
        step, value, moment = obj.get("step"), obj.get("value"), obj.get("time")
        if (name is None or type(step) is not int or type(value) is not float
                or type(moment) is not float or not STEP_MIN <= step <= STEP_MAX
                or moment - moment != 0):
            return None  # not plainly valid: the full check decides
        return Point(name, step, value, moment)


def _loaded(line: bytes) -> Any:
    try:
        return _DECODE(line.decode())  # UTF-8 only: json.loads would guess UTF-16 too
    except (ValueError, RecursionError):
        return None


def _checked(obj: Any) -> Point | None:
    try:
        return parse_point(obj)
    except ValueError:
        return None


def read_new_points(
    run_dir: Path,
    offset: int,
    *,
    relative: str = METRICS_FILE,
    max_bytes: int = CHUNK_BYTES,
    max_points: int | None = None,
) -> tuple[list[Point], int]:
    """The valid points of the whole lines written from byte ``offset`` on (at most
    ``max_bytes`` read, at most ``max_points`` points) and the offset right after the last
    line taken: a live reader's next batch. A line not ended yet waits; a window holding no
    line end at all is skipped (no point is so long). An offset past the file's end (a
    file rewritten) reads nothing."""
    try:
        opened = open_under(run_dir, relative, hidden=True, single_link=True)
    except (NoSuchFile, UnsafePath, OSError):
        return [], offset
    with opened:
        window = os.pread(opened.fd, max_bytes, offset)
    if window.rfind(b"\n") < 0:
        return [], offset + (len(window) if len(window) >= max_bytes else 0)
    reader = _PointReader()
    start = 0
    while (end := window.find(b"\n", start)) >= 0:
        line = window[start:end]
        start = end + 1
        if len(line) <= MAX_LINE_BYTES:
            reader.take(line)
            if max_points is not None and len(reader.points) >= max_points:
                break
    return reader.points, offset + start


def _lines(root: Path, relative: str, max_bytes: int) -> Iterator[bytes]:
    """The complete lines (newline ended) in the first ``max_bytes`` of the file, each at
    most :data:`MAX_LINE_BYTES`; a longer line is skipped whole, never held whole."""
    try:
        opened = open_under(root, relative, hidden=True, single_link=True)
    except (NoSuchFile, UnsafePath, OSError):
        return
    with opened:
        pending = b""
        skipping = False  # inside a line that is already too long
        offset = 0
        while offset < max_bytes:
            chunk = os.pread(opened.fd, min(CHUNK_BYTES, max_bytes - offset), offset)
            if not chunk:
                return
            offset += len(chunk)
            parts = (pending + chunk).split(b"\n")
            pending = parts.pop()
            for part in parts:
                if not skipping and len(part) <= MAX_LINE_BYTES:
                    yield part
                skipping = False
            if len(pending) > MAX_LINE_BYTES:
                pending, skipping = b"", True


def summarise(points: Iterable[Point]) -> dict[str, dict[str, Any]]:
    """Per metric name: ``{"last", "min", "max", "step", "count"}``: the last value and its
    step (file order), the extremes ignoring NaN (``None`` when every value is NaN) and
    the number of points; values in wire form."""
    folds: dict[str, list[Any]] = {}
    for point in points:
        fold = folds.get(point.name)
        if fold is None:
            folds[point.name] = fold = [0.0, None, None, 0, 0]
        fold[0], fold[3] = point.value, point.step
        fold[4] += 1
        value = point.value
        if not math.isnan(value):
            if fold[1] is None or value < fold[1]:
                fold[1] = value
            if fold[2] is None or value > fold[2]:
                fold[2] = value
    return {name: metric_summary(*fold) for name, fold in folds.items()}



def series(
    points: Iterable[Point], max_points: int | None = None
) -> dict[str, dict[str, list[Any]]]:
    """Per metric name, its points as ``{"steps", "values", "times"}`` (file order, values
    in wire form). With ``max_points`` (at least 2) each metric keeps at most that many:
    its first and last, and between them the lowest and highest point of each of equal
    buckets, so a spike survives the thinning."""
    if max_points is not None and max_points < 2:
        raise InvalidInput("max_points must be at least 2")
    grouped: dict[str, list[Point]] = {}
    for point in points:
        grouped.setdefault(point.name, []).append(point)
    answer: dict[str, dict[str, list[Any]]] = {}
    for name, kept in grouped.items():
        if max_points is not None and len(kept) > max_points:
            kept = [kept[index] for index in _thin(kept, max_points)]
        answer[name] = {
            "steps": [point.step for point in kept],
            "values": [wire_value(point.value) for point in kept],
            "times": [point.time for point in kept],
        }
    return answer


def _thin(points: list[Point], max_points: int) -> list[int]:
    """The indices kept of ``points`` (more than ``max_points`` of them), ascending."""
    last = len(points) - 1
    budget = max_points - 2
    buckets = budget // 2 or budget  # one pick per bucket when only one is left
    kept = {0, last}
    for bucket in range(buckets):
        start = 1 + bucket * (last - 1) // buckets
        end = 1 + (bucket + 1) * (last - 1) // buckets
        kept.update(_extremes(points, start, end, both=budget >= 2))
    return sorted(kept)


def _extremes(points: list[Point], start: int, end: int, *, both: bool) -> set[int]:
    """The indices of the lowest and highest value in ``points[start:end]`` (NaN ignored,
    unless every value is NaN: then the first); only the highest unless ``both``."""
    low = high = None
    for index in range(start, end):
        value = points[index].value
        if math.isnan(value):
            continue
        if low is None or value < points[low].value:
            low = index
        if high is None or value > points[high].value:
            high = index
    if high is None or low is None:
        return {start} if start < end else set()
    return {low, high} if both else {high}


def read_params(run_dir: Path) -> dict[str, Any]:
    """The params the run logged (``params.json``), ``{}`` when absent or not a JSON
    object; entries whose name or value breaks the rules are left out."""
    data = b"".join(_whole(run_dir, PARAMS_FILE, MAX_PARAMS_BYTES))
    try:
        loaded = json.loads(data) if data else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    params = {}
    for name, value in loaded.items():
        try:
            params[check_metric_name(name)] = param_value(value)
        except InvalidInput:
            continue
    return params


def _whole(root: Path, relative: str, max_bytes: int) -> Iterator[bytes]:
    """The file's bytes, nothing when it is missing, unsafe or longer than ``max_bytes``."""
    try:
        opened = open_under(root, relative, hidden=True, single_link=True)
    except (NoSuchFile, UnsafePath, OSError):
        return
    with opened:
        if opened.size > max_bytes:
            return
        yield os.pread(opened.fd, max_bytes + 1, 0)[:max_bytes]


def run_params(status: TaskStatus, logged: dict[str, Any]) -> dict[str, Any]:
    """A run's params: its inputs (``config`` less ``task_name`` and ``source_tasks``),
    updated with the ones it logged."""
    params = {name: value for name, value in status.config.items() if name not in INPUT_ONLY}
    params.update(logged)
    return params
