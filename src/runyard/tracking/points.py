"""Metric points and params: their names, their values and their wire form.

A run's metrics are points ``(name, step, value, time)`` kept one JSON object a line in
``metrics.jsonl`` of the run's folder::

    {"name": "loss", "step": 3, "value": 0.25, "time": 1765140000.123}

The rules are MLflow's, so its client's names and values are accepted as they are:

* a name is 1-250 characters of letters, digits and ``_ - . / : space``, not starting
  with ``/``;
* a step is an int in the signed 64-bit range (negative ones too), stored as given;
* a value is a float; NaN and the infinities are written as the strings ``"NaN"``,
  ``"Infinity"`` and ``"-Infinity"`` (JSON has no number for them, and a bare ``NaN``
  token breaks strict JSON readers such as a browser's ``JSON.parse``);
* a time is float seconds since the epoch.

Params are named like metrics; their values are JSON scalars, a string cut to
:data:`MAX_PARAM_CHARS` characters.

Every ``parse_*``/``check_*`` function raises :class:`~runyard.errors.InvalidInput` (a
``ValueError``) whose message is one line saying what was wrong and what is allowed.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

from runyard.errors import InvalidInput

METRICS_FILE = "metrics.jsonl"
PARAMS_FILE = "params.json"
# the file of the task folder that any process of the task may append metric lines to
METRICS_ENV = "RUNYARD_METRICS_FILE"
METRICS_IN_FILE = ".metrics-in.jsonl"

MAX_NAME_CHARS = 250
MAX_PARAM_CHARS = 6000
STEP_MIN = -(2**63)
STEP_MAX = 2**63 - 1
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_NAME = re.compile(r"[\w\-./ :]+")


@dataclass(frozen=True, slots=True)
class Point:
    """One value of metric ``name`` at ``step``, taken at ``time`` (epoch seconds)."""

    name: str
    step: int
    value: float
    time: float


@dataclass(frozen=True, slots=True)
class LoggedLine:
    """A line a process of the task wrote to ``$RUNYARD_METRICS_FILE``: step and time
    may be left out (the metric's next step; the time it was read)."""

    name: str
    value: float
    step: int | None
    time: float | None


def check_metric_name(name: object) -> str:
    """``name`` when it is a valid metric (or param) name, else :class:`InvalidInput`."""
    if not isinstance(name, str):
        raise InvalidInput(f"a metric name must be a string, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_NAME_CHARS:
        raise InvalidInput(f"a metric name must be 1-{MAX_NAME_CHARS} characters long")
    if _NAME.fullmatch(name) is None:
        raise InvalidInput(
            f"invalid metric name {name[:80]!r}: only letters, digits and '_-./ :' are allowed"
        )
    if name.startswith("/"):
        raise InvalidInput(f"invalid metric name {name[:80]!r}: it may not start with '/'")
    return name


def check_step(step: object) -> int:
    """``step`` when it is an int in the signed 64-bit range (a bool is not a step)."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise InvalidInput(f"a step must be an integer, not {type(step).__name__}")
    if not STEP_MIN <= step <= STEP_MAX:
        raise InvalidInput("a step must fit in a signed 64-bit integer")
    return step


def metric_value(value: object) -> float:
    """A value a task logs, as a float: an int, float or bool, or any number type that
    converts with ``float()`` (numpy scalars, Decimal). Strings are refused, even "1"."""
    if isinstance(value, str | bytes | bytearray):
        raise InvalidInput(f"a metric value must be a number, not {type(value).__name__}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInput(
            f"a metric value must be a number, not {type(value).__name__}"
        ) from exc


def wire_value(value: float) -> float | str:
    """``value`` as JSON carries it: a number, or "NaN" / "Infinity" / "-Infinity"."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def point_json(point: Point) -> dict[str, Any]:
    """The wire (and ``metrics.jsonl``) form of ``point``."""
    return {"name": point.name, "step": point.step, "value": wire_value(point.value),
            "time": point.time}


def parse_point(obj: object) -> Point:
    """A :class:`Point` from its wire form (a line of ``metrics.jsonl``), every field
    required."""
    fields = _object(obj)
    if "step" not in fields or "time" not in fields:
        raise InvalidInput("a point needs name, step, value and time")
    line = parse_logged(fields)
    return Point(line.name, line.step, line.value, line.time)  # type: ignore[arg-type]


def parse_logged(obj: object) -> LoggedLine:
    """A line of ``$RUNYARD_METRICS_FILE``: ``{"name", "value"}`` with optional ``step``
    and ``time``; other keys are refused (a typo such as ``"stpe"`` would otherwise be
    silently read as the next step)."""
    fields = _object(obj)
    unknown = set(fields) - {"name", "value", "step", "time"}
    if unknown:
        raise InvalidInput(f"unknown key {sorted(unknown)[0][:40]!r} (allowed: name, value, "
                           "step, time)")
    if "name" not in fields or "value" not in fields:
        raise InvalidInput("a metric line needs a name and a value")
    step = fields.get("step")
    time = fields.get("time")
    return LoggedLine(
        name=check_metric_name(fields["name"]),
        value=_wire_number(fields["value"]),
        step=None if step is None else check_step(step),
        time=None if time is None else _epoch(time),
    )


def _object(obj: object) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InvalidInput(f"a metric line must be a JSON object, not {type(obj).__name__}")
    return obj


def _wire_number(value: object) -> float:
    """A value as JSON may carry it: a number (not a bool) or a non-finite's string."""
    if isinstance(value, str):
        if value in NON_FINITE:
            return NON_FINITE[value]
        raise InvalidInput(
            f"a value must be a number or one of 'NaN', 'Infinity', '-Infinity', not "
            f"{value[:40]!r}"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"a value must be a number, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError as exc:  # an int past a float's range
        raise InvalidInput("a value must fit in a 64-bit float") from exc


def _epoch(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"a time must be epoch seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidInput("a time must be a finite number of epoch seconds")
    return seconds


def param_value(value: object) -> str | int | float | bool | None:
    """A logged param's value: a JSON scalar (a string cut to :data:`MAX_PARAM_CHARS`);
    a non-finite float is kept as its string form, as metric values are."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value[:MAX_PARAM_CHARS]
    if isinstance(value, numbers.Integral):  # int, numpy's ints
        number = int(value)
        # past 64 bits a JSON reader (a browser's) loses digits: kept exact as text
        return number if STEP_MIN <= number <= STEP_MAX else str(number)[:MAX_PARAM_CHARS]
    if isinstance(value, numbers.Real):  # float, numpy's floats
        real = float(value)
        return real if math.isfinite(real) else wire_value(real)
    raise InvalidInput(
        f"a param value must be a string, number, bool or None, not {type(value).__name__}"
    )


def metric_summary(
    last: float, low: float | None, high: float | None, step: int, count: int
) -> dict[str, Any]:
    """A metric's summary as the status and the answers carry it: ``{"last", "min", "max",
    "step", "count"}``, values in wire form, ``min``/``max`` None when every value is NaN."""
    return {
        "last": wire_value(last),
        "min": None if low is None else wire_value(low),
        "max": None if high is None else wire_value(high),
        "step": step,
        "count": count,
    }
