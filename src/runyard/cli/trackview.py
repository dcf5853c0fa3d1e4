"""The tables ``runyard metrics`` and ``runyard compare`` print, from their API answers.

A value is a number or one of "NaN", "Infinity", "-Infinity" (as the API carries them); a
sparkline draws a series in eight block heights, a non-finite point as a blank::

    sparkline([0.0, 0.5, 1.0, "NaN"])    # "▁▅█ "
"""

from __future__ import annotations

import json
import math
from typing import Any

from runyard.cli.common import console
from runyard.cli.tables import Column, grid, print_table

BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 32
DIFFERS_MARK = "≠"


def number(value: Any) -> float:
    """A wire value as a float: the non-finite strings as the floats they name."""
    if isinstance(value, str):
        return {"Infinity": math.inf, "-Infinity": -math.inf}.get(value, math.nan)
    return float(value)


def shown(value: Any) -> str:
    """A value for a cell: numbers in 6 significant digits, "-" for none."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value if isinstance(value, str) else json.dumps(value)
    return f"{value:.6g}"


def sparkline(values: list[Any], width: int = SPARK_WIDTH) -> str:
    """``values`` in at most ``width`` block characters (each the last value of its share
    of the series), scaled between the finite minimum and maximum."""
    numbers = [number(v) for v in values]
    if len(numbers) > width:
        numbers = [numbers[((i + 1) * len(numbers)) // width - 1] for i in range(width)]
    finite = [v for v in numbers if math.isfinite(v)]
    if not finite:
        return " " * len(numbers)
    low, high = min(finite), max(finite)
    scale = (len(BLOCKS) - 1) / (high - low) if high > low else 0.0
    return "".join(BLOCKS[round((v - low) * scale)] if math.isfinite(v) else " " for v in numbers)


def metric_row(name: str, series: dict[str, Any]) -> list[str]:
    """``[metric, steps, last, min, max, sparkline]`` of one series (thinned series keep
    their first, last and extremes, so these stay exact)."""
    steps, values = series["steps"], series["values"]
    finite = [number(v) for v in values if not (isinstance(v, str) and v == "NaN")]
    if not steps:
        return [name, "-", "-", "-", "-", ""]
    return [
        name,
        f"{steps[0]}..{steps[-1]}" if len(steps) > 1 else str(steps[0]),
        shown(values[-1]),
        shown(min(finite)) if finite else "-",
        shown(max(finite)) if finite else "-",
        sparkline(values),
    ]


def metrics_tables(answer: dict[str, Any]) -> None:
    """One table per run of a ``/metrics`` answer, headed by its run id and state."""
    columns = [Column("metric", is_id=True), Column("steps", whole=True), Column("last"),
               Column("min"), Column("max"), Column("trend", whole=True)]  # fmt: skip
    if not answer["runs"]:
        console.print(f"{answer['task_id']}: no runs")
    for run in answer["runs"]:
        current = ", current" if run["current"] else ""
        console.print(f"run {run['run_id']} ({run['state']}{current})", highlight=False)
        rows = [metric_row(name, series) for name, series in sorted(run["metrics"].items())]
        if rows:
            print_table(grid(columns, rows))
        else:
            console.print("  no metrics logged", highlight=False)


def compare_tables(answer: dict[str, Any]) -> None:
    """The params side by side (those that differ first, marked ≠), then each metric's
    last value (and min..max) per run."""
    labels = [f"{item['task_id']}@{item['run_id']}" for item in answer["items"]]
    for index, label in enumerate(labels, start=1):
        console.print(f"[{index}] {label} ({answer['items'][index - 1]['state']})", highlight=False)
    heads = [Column(f"[{n}]") for n in range(1, len(labels) + 1)]
    params = [
        [DIFFERS_MARK if row["differs"] else "", row["name"], *map(shown, row["values"])]
        for row in answer["params"]
    ]
    if params:
        print_table(grid([Column("", whole=True), Column("param", is_id=True), *heads], params))
    metrics = [[row["name"], *map(_summary, row["values"])] for row in answer["metrics"]]
    if metrics:
        print_table(grid([Column("metric", is_id=True), *heads], metrics))


def _summary(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "-"
    low, high = summary.get("min"), summary.get("max")
    extremes = f" ({shown(low)}..{shown(high)})" if low is not None or high is not None else ""
    return f"{shown(summary.get('last'))}{extremes}"
