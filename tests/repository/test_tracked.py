"""The rules of sorting and filtering task lists by params and metric summaries."""

from __future__ import annotations

import pytest

from runyard.errors import InvalidInput
from runyard.repository.tracked import (
    metric_sort_value,
    param_matches,
    param_sort_value,
    parse_filters,
    run_params,
    split_order,
    status_matches,
)
from runyard.tracking.jsonequal import json_equal


def test_params_are_inputs_updated_with_logged_ones() -> None:
    config = {"task_name": "x", "source_tasks": "a", "alpha": 1, "model": "ridge"}
    assert run_params(config, {"alpha": 2, "folds": 5}) == {
        "alpha": 2, "model": "ridge", "folds": 5
    }  # fmt: skip
    assert run_params(config, None) == {"alpha": 1, "model": "ridge"}
    assert run_params(config, ["not", "a", "dict"]) == {"alpha": 1, "model": "ridge"}


def test_filter_values_match_json_text_or_string() -> None:
    assert param_matches("ridge", "ridge") and param_matches("1", "1")
    assert param_matches(1, "1") and param_matches(1, "1.0") and param_matches(0.1, "0.1")
    assert param_matches(True, "true") and not param_matches(True, "1")
    assert not param_matches(1, "true") and not param_matches(None, "")
    assert param_matches(None, "null") and not param_matches("ridge", "lasso")
    assert json_equal([1, {"a": 2.0}], [1.0, {"a": 2}]) and not json_equal(0, False)


def test_sort_values_and_order_suffixes() -> None:
    assert metric_sort_value("Infinity") == float("inf") and metric_sort_value("NaN") is None
    assert metric_sort_value(float("nan")) is None and metric_sort_value(True) is None
    assert param_sort_value(3) == 3.0 and param_sort_value(True) == "true"
    assert param_sort_value(None) is None and param_sort_value("a") == "a"
    assert split_order("metrics.cv_r2:desc", None) == ("metrics.cv_r2", "desc")
    assert split_order("metrics.a:b", "asc") == ("metrics.a:b", "asc")
    assert split_order("created_at:desc", None) == ("created_at:desc", None)  # refused later
    with pytest.raises(InvalidInput, match="give one of them"):
        split_order("params.x:asc", "desc")


def test_filters_parse_and_hold_on_statuses() -> None:
    filters = parse_filters(["params.model=ridge", "params.eq=a=b"])
    assert filters == [("model", "ridge"), ("eq", "a=b")]
    status = {"config": {"task_name": "n", "model": "ridge"}, "params": {"eq": "a=b"}}
    assert status_matches(status, filters)
    assert not status_matches({"config": {"model": "ridge"}}, filters)  # eq missing
    assert not status_matches({"config": {"task_name": "ridge"}}, [("task_name", "ridge")])
    for bad in ("model=ridge", "params.model", "params.=x", "metrics.a=1"):
        with pytest.raises(InvalidInput, match="params"):
            parse_filters([bad])
