"""The worker's side of a run's metrics and params: kept in memory, written in batches.

:class:`MetricRecorder` takes points as a task logs them (checked by the rules of
:mod:`runyard.tracking.points`), folds each into its metric's summary at once, and keeps
the point's line until :meth:`~MetricRecorder.flush` appends all the lines it holds to
``metrics.jsonl`` in one write, and rewrites ``params.json`` (atomically) when the logged
params changed. Who calls ``flush`` and when (a size, a timer, a step's end, the run's end)
is the caller's business: the recorder starts no thread::

    recorder = MetricRecorder(task_dir)
    recorder.log("loss", 0.25)            # step 0
    recorder.log("loss", 0.2)             # step 1
    recorder.log_params({"lr": 0.1})
    recorder.flush()                      # two lines appended, params.json written
    recorder.summary()["loss"]            # {"last": 0.2, "min": 0.2, "max": 0.25, ...}

It is safe to use from several threads of one process (one lock).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runyard.errors import InvalidInput
from runyard.tracking.points import (
    METRICS_FILE,
    PARAMS_FILE,
    check_metric_name,
    check_step,
    metric_summary,
    metric_value,
    param_value,
    wire_value,
)
from runyard.workspace.atomic import write_json_atomic

FLUSH_POINTS = 5000  # a buffer this long is written at once, not when its timer ends
# the status carries a summary per metric and every param: bounded, as a record must be
MAX_METRICS = 1000
MAX_PARAMS = 1000


class MetricRecorder:
    """Buffered points and logged params of one run, written into ``task_dir``."""

    def __init__(self, task_dir: Path) -> None:
        self.task_dir = task_dir
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._folds: dict[str, list[Any]] = {}  # name -> [last, min, max, step, count, json]
        self._params: dict[str, Any] = {}
        self._params_changed = False
        self.changed = False  # something new since the last summary was taken
        self._milli = -1  # the millisecond of the last point, and its text
        self._moment = ""

    @property
    def pending(self) -> int:
        """How many points wait to be written."""
        return len(self._lines)

    def log(
        self, name: str, value: object, step: int | None = None, at: float | None = None
    ) -> int:
        """Keep one point (``step`` None: the metric's next step, 0 for its first); the
        number of points now waiting. Raises ``InvalidInput`` for a bad name, value or step."""
        # one function, no helper calls: a task may call it a hundred thousand times
        if type(value) is not float:
            value = metric_value(value)
        if step is not None:
            check_step(step)
        if at is None:  # MLflow's resolution: a millisecond, its text made once for all in it
            milli = int(time.time() * 1000)
            if milli != self._milli:
                self._milli, self._moment = milli, repr(milli / 1000)
            moment = self._moment
        else:
            moment = repr(at)
        with self._lock:
            fold = self._folds.get(name) if type(name) is str else None
            if fold is None:
                fold = self._new_metric(name)
            if step is None:
                step = fold[3] + 1 if fold[4] else 0
            fold[0] = value
            fold[3] = step
            fold[4] += 1
            if value == value:  # NaN takes no part in min and max
                if fold[1] is None or value < fold[1]:
                    fold[1] = value
                if fold[2] is None or value > fold[2]:
                    fold[2] = value
                text = repr(value) if value - value == 0 else f'"{wire_value(value)}"'
            else:
                text = '"NaN"'
            self._lines.append(
                f'{{"name": {fold[5]}, "step": {step}, "value": {text}, "time": {moment}}}\n'
            )
            self.changed = True
            return len(self._lines)

    def log_many(self, values: Mapping[str, object], step: int | None = None) -> int:
        """:meth:`log` of each ``name: value`` at one ``step``, all checked first: a bad
        one raises and none is kept."""
        if not isinstance(values, Mapping):
            raise TypeError(f"metrics must be a mapping, not {type(values).__name__}")
        checked = [(name, metric_value(value)) for name, value in values.items()]
        new = {check_metric_name(name) for name, _ in checked if name not in self._folds}
        if len(self._folds) + len(new) > MAX_METRICS:
            raise InvalidInput(f"a run may log at most {MAX_METRICS} metrics")
        if step is not None:
            check_step(step)
        waiting = self.pending
        for name, value in checked:
            waiting = self.log(name, value, step)
        return waiting

    def _new_metric(self, name: str) -> list[Any]:
        """The fold of a metric not logged before: [last, min, max, step, count, its JSON
        name]."""
        quoted = json.dumps(check_metric_name(name))
        if len(self._folds) >= MAX_METRICS:
            raise InvalidInput(f"a run may log at most {MAX_METRICS} metrics")
        fold = self._folds[name] = [0.0, None, None, -1, 0, quoted]
        return fold

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Add (or replace) logged params; all are checked before any is kept."""
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping, not {type(params).__name__}")
        checked = {check_metric_name(name): param_value(value) for name, value in params.items()}
        with self._lock:
            if len(self._params.keys() | checked.keys()) > MAX_PARAMS:
                raise InvalidInput(f"a run may log at most {MAX_PARAMS} params")
            self._params.update(checked)
            self._params_changed = True
            self.changed = True

    def flush(self, *, durable: bool = False) -> bool:
        """Append the waiting lines to ``metrics.jsonl`` and write ``params.json`` if the
        params changed; whether anything was written. ``durable`` fsyncs what it wrote."""
        with self._lock:
            lines, self._lines = self._lines, []
            params = dict(self._params) if self._params_changed else None
            self._params_changed = False
        if lines:
            _append(self.task_dir / METRICS_FILE, "".join(lines).encode(), durable)
        if params is not None:
            write_json_atomic(self.task_dir / PARAMS_FILE, params, fsync=durable)
        return bool(lines) or params is not None

    def reset_lock(self) -> None:
        """A fresh lock (in a forked child, whose copy may be held by a gone thread)."""
        self._lock = threading.Lock()

    def drop_pending(self) -> None:
        """Forget the points not written (a forked child's copy of its parent's)."""
        with self._lock:
            self._lines = []
            self._params_changed = False

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per metric: ``{"last", "min", "max", "step", "count"}`` (values in wire form)."""
        with self._lock:
            self.changed = False
            return {name: metric_summary(*fold[:5]) for name, fold in self._folds.items()}

    def params(self) -> dict[str, Any]:
        """The params logged so far."""
        with self._lock:
            return dict(self._params)



def _append(path: Path, data: bytes, durable: bool) -> None:
    """One ``write`` with ``O_APPEND``: lines of two processes of the task never mix."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
