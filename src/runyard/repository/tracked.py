"""Task lists sorted and filtered by what experiment tracking records of a run.

A status carries the params its task logged (``params``) and a summary per metric
(``metrics``: ``{"last", "min", "max", "step", "count"}``). The params of a run are its
inputs (``config`` without ``task_name`` and ``source_tasks``) updated with the logged
ones, as everywhere tracking shows them. The list takes three forms on top of the plain
columns of :mod:`runyard.repository.ordering`::

    sort=metrics.cv_r2          # by the metric's last value
    sort=params.alpha           # by the param's value: numbers before text
    filter=params.model=ridge   # repeatable: every filter must hold

A sort may end in ``:asc`` or ``:desc`` (``sort=metrics.cv_r2:desc``), the order it is
sorted in. A task without the metric or param (or whose last value is NaN) sorts last
in either order. A filter's value matches a param whose JSON text is that value
(``params.C=0.1``, ``params.deep=true``), or a string param equal to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from runyard.errors import InvalidInput
from runyard.tracking.jsonequal import json_equal
from runyard.workspace.records import TaskStatus

METRIC_PREFIX = "metrics."
PARAM_PREFIX = "params."
ORDER_SUFFIXES = (":asc", ":desc")
NOT_PARAMS = ("task_name", "source_tasks")  # inputs every task has: no one compares them
MAX_KEY_CHARS = 250
MAX_FILTERS = 20
_INFINITIES = {"Infinity": math.inf, "-Infinity": -math.inf}

SortValue = float | str | None
Filter = tuple[str, str]


def run_params(config: dict[str, Any], logged: object) -> dict[str, Any]:
    """A run's params: its inputs, updated with what it logged (a dict, or nothing)."""
    params = {k: v for k, v in config.items() if k not in NOT_PARAMS}
    if isinstance(logged, dict):
        params.update(logged)
    return params


def split_order(sort: str, order: str | None) -> tuple[str, str | None]:
    """``(sort, order)`` with an ``:asc``/``:desc`` suffix of a tracked sort taken as the
    order; an ``order`` given as well must agree with it."""
    if not sort.startswith((METRIC_PREFIX, PARAM_PREFIX)):
        return sort, order
    for suffix in ORDER_SUFFIXES:
        if sort.endswith(suffix):
            named = suffix[1:]
            if order and order != named:
                raise InvalidInput(
                    f"sort {sort!r} asks for {named} but order is {order!r}: give one of them"
                )
            return sort[: -len(suffix)], named
    return sort, order


def tracked_key(sort: str) -> Callable[[TaskStatus], SortValue] | None:
    """The sort value of ``metrics.<name>`` or ``params.<name>``; None for any other sort.
    :class:`InvalidInput` for an empty or over-long name."""
    for prefix, key in ((METRIC_PREFIX, _metric_key), (PARAM_PREFIX, _param_key)):
        if sort.startswith(prefix):
            return key(_key_name(sort, prefix))
    return None


def _key_name(text: str, prefix: str) -> str:
    name = text[len(prefix) :]
    if not 1 <= len(name) <= MAX_KEY_CHARS:
        raise InvalidInput(
            f"{prefix}<name> needs a name of 1-{MAX_KEY_CHARS} characters, got {text[:300]!r}"
        )
    return name


def _metric_key(name: str) -> Callable[[TaskStatus], SortValue]:
    def key(status: TaskStatus) -> SortValue:
        summary = (status.metrics or {}).get(name)
        return metric_sort_value(summary.get("last") if isinstance(summary, dict) else None)

    return key


def metric_sort_value(value: object) -> float | None:
    """A summary's value as it sorts: a number, the infinities as such, NaN as missing."""
    if isinstance(value, str):
        return _INFINITIES.get(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def _param_key(name: str) -> Callable[[TaskStatus], SortValue]:
    def key(status: TaskStatus) -> SortValue:
        params = run_params(status.config, status.params)
        return param_sort_value(params.get(name))

    return key


def param_sort_value(value: object) -> SortValue:
    """A param as it sorts: numbers as numbers, strings as they are, anything else (a bool,
    a list) as its JSON text; null as missing."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None if math.isnan(value) else float(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def parse_filters(raw: Iterable[str]) -> list[Filter]:
    """``[(name, value), ...]`` of ``params.<name>=<value>`` filters; :class:`InvalidInput`
    names what is wrong with any other."""
    filters = []
    for text in raw:
        name, equals, value = text.partition("=")
        if not text.startswith(PARAM_PREFIX) or not equals:
            raise InvalidInput(
                f"Unknown filter {text[:300]!r}: use params.<name>=<value>"
                " (a param's JSON text, or a string param's text)"
            )
        filters.append((_key_name(name, PARAM_PREFIX), value))
    if len(filters) > MAX_FILTERS:
        raise InvalidInput(f"at most {MAX_FILTERS} filters, got {len(filters)}")
    return filters


def param_matches(value: object, wanted: str) -> bool:
    """Whether a param's ``value`` is ``wanted``: its JSON text (numbers compared as
    numbers, so ``1`` matches ``1.0``), or, for a string, the string itself."""
    if isinstance(value, str) and value == wanted:
        return True
    try:
        parsed = json.loads(wanted)
    except ValueError:
        return False
    return json_equal(value, parsed)


def status_matches(status: dict[str, Any], filters: list[Filter]) -> bool:
    """Whether a status (as JSON) holds every filter; a missing param holds none."""
    config = status.get("config")
    params = run_params(config if isinstance(config, dict) else {}, status.get("params"))
    return all(name in params and param_matches(params[name], v) for name, v in filters)
