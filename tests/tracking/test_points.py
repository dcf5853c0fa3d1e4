"""Metric names, values and points follow MLflow's rules; non-finite values travel as
strings."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction

import pytest

from runyard.errors import InvalidInput
from runyard.tracking.points import (
    Point,
    check_metric_name,
    metric_value,
    param_value,
    parse_logged,
    parse_point,
    point_json,
    wire_value,
)


@pytest.mark.parametrize("name", ["loss", "val/acc", "a b:c-d_e.f", "x" * 250, "é"])
def test_names_mlflow_accepts(name: str) -> None:
    assert check_metric_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "x" * 251, "/abs", "a\nb", "a\x00b", "a;b", "a\\b", "<script>", 3, None]
)
def test_names_refused(name: object) -> None:
    with pytest.raises(InvalidInput):
        check_metric_name(name)


def test_values_from_numbers_and_number_types() -> None:
    assert metric_value(3) == 3.0 and metric_value(True) == 1.0
    assert metric_value(Decimal("0.5")) == 0.5 and metric_value(Fraction(1, 4)) == 0.25
    assert math.isnan(metric_value(float("nan"))) and metric_value(float("-inf")) == -math.inf
    for bad in ("1", b"1", None, [1], {"a": 1}, 1j, 10**400):
        with pytest.raises(InvalidInput):
            metric_value(bad)


def test_non_finite_values_are_strings_on_the_wire() -> None:
    assert wire_value(1.5) == 1.5
    assert [wire_value(v) for v in (math.nan, math.inf, -math.inf)] == [
        "NaN", "Infinity", "-Infinity"]
    line = json.dumps(point_json(Point("loss", 1, math.nan, 2.0)), allow_nan=False)
    back = parse_point(json.loads(line))
    assert back.name == "loss" and back.step == 1 and math.isnan(back.value)


def test_point_round_trip_and_refusals() -> None:
    point = Point("m", -(2**63), -math.inf, 1765140000.123)
    assert parse_point(json.loads(json.dumps(point_json(point)))) == point
    good = {"name": "m", "step": 1, "value": 1, "time": 1.0}
    bad_fields = [
        {"step": 1.5}, {"step": True}, {"step": 2**63}, {"step": "1"},
        {"value": "nan"}, {"value": True}, {"value": None}, {"value": "1"},
        {"time": "now"}, {"name": "/x"}, {"name": 7},
    ]
    for change in bad_fields:
        with pytest.raises(InvalidInput):
            parse_point({**good, **change})
    for missing in ("name", "step", "value", "time"):
        with pytest.raises(InvalidInput):
            parse_point({k: v for k, v in good.items() if k != missing})
    with pytest.raises(InvalidInput):
        parse_point([good])


def test_logged_lines_take_optional_step_and_time_and_refuse_unknown_keys() -> None:
    line = parse_logged({"name": "acc", "value": 0.5})
    assert (line.step, line.time) == (None, None)
    assert parse_logged({"name": "acc", "value": "Infinity", "step": 4}).value == math.inf
    with pytest.raises(InvalidInput, match="unknown key 'stpe'"):
        parse_logged({"name": "acc", "value": 0.5, "stpe": 4})


def test_param_values() -> None:
    assert param_value("x" * 10_000) == "x" * 6000
    assert [param_value(v) for v in (None, True, 3, 0.5)] == [None, True, 3, 0.5]
    assert param_value(2**70) == str(2**70) and param_value(math.inf) == "Infinity"
    for bad in ([1], {"a": 1}, b"x", object()):
        with pytest.raises(InvalidInput):
            param_value(bad)


def test_a_status_never_holds_a_bare_non_finite_float() -> None:
    from runyard.wire import TaskStatus

    forged = json.loads(
        '{"task_id": "base#t#x", "run_id": "r1", "task_type": "base", "task_name": "x",'
        ' "state": "running", "created_at": "2026-01-01T00:00:00Z",'
        ' "params": {"lr": NaN, "deep": [[Infinity]]},'
        ' "metrics": {"loss": {"last": -Infinity, "min": NaN, "max": 1.0, "step": 3, "count": 4}}}'
    )
    status = TaskStatus.model_validate(forged)
    text = json.dumps(status.to_json(), allow_nan=False)
    assert json.loads(text)["metrics"]["loss"] == {
        "last": "-Infinity", "min": "NaN", "max": 1.0, "step": 3, "count": 4}
    assert status.params == {"lr": "NaN", "deep": [["Infinity"]]}
    plain = TaskStatus.model_validate({k: v for k, v in forged.items()
                                       if k not in ("params", "metrics")})
    assert "params" not in plain.to_json() and "metrics" not in plain.to_json()
