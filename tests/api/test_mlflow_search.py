"""search_runs' filter grammar, ordering and paging (runyard.api.mlflow.search)."""

from __future__ import annotations

import pytest
from starlette.responses import JSONResponse
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from runyard.api.auth import BearerAuth
from runyard.api.mlflow.errors import MlflowRefusal
from runyard.api.mlflow.search import (
    Row,
    matches,
    newest_first,
    ordered,
    page,
    parse_filter,
    parse_order,
)


def row(run_id: str, start: int, metrics=None, params=None, tags=None, status="FINISHED") -> Row:
    info = {"run_id": run_id, "start_time": start, "status": status, "run_name": run_id}
    return Row(info, metrics or {}, params or {}, tags or {})


RUNS = [
    row("a", 1, {"rmse": 0.4, "r2": 0.9}, {"model": "ridge", "C": "0.1"}, {"team": "x y"}),
    row("b", 2, {"rmse": 0.6}, {"model": "lasso"}, {}, status="FAILED"),
    row("c", 3, {"rmse": "NaN"}, {"model": "Ridge-big"}, {"team": "z"}, status="RUNNING"),
]


def kept(text: str) -> list[str]:
    clauses = parse_filter(text)
    return [r.info["run_id"] for r in RUNS if matches(r, clauses)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["a", "b", "c"]),
        ("metrics.rmse < 0.5", ["a"]),
        ("metrics.rmse >= 0.4 and metrics.rmse <= 0.6", ["a", "b"]),
        ("metrics.rmse != 0.4", ["b", "c"]),  # NaN differs from every number
        ("metrics.r2 > 0", ["a"]),  # a run without the metric never matches
        ("params.model = 'ridge'", ["a"]),
        ('params.model = "lasso"', ["b"]),
        ("params.model LIKE 'ridge%'", ["a"]),
        ("params.model ILIKE 'ridge%'", ["a", "c"]),
        ("params.model != 'ridge'", ["b", "c"]),
        ("tags.team = 'x y'", ["a"]),
        ("tags.`team` = 'z'", ["c"]),
        ("attributes.status = 'FINISHED'", ["a"]),
        ("status != 'FINISHED'", ["b", "c"]),
        ("attributes.run_id IN ('a', 'c')", ["a", "c"]),
        ("attributes.run_id NOT IN ('a')", ["b", "c"]),
        ("attributes.start_time > 1", ["b", "c"]),
        ("run_name LIKE '_'", ["a", "b", "c"]),
        ("metrics.rmse<0.5 AND params.C='0.1' AND attributes.status='FINISHED'", ["a"]),
    ],
)
def test_filters_keep_the_runs_they_describe(text: str, expected: list[str]) -> None:
    assert kept(text) == expected


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("metrics.a > 1 OR metrics.b < 2", "only AND"),
        ("(metrics.a > 1)", "expected a name"),
        ("metrics.a > 'x'", "compare a number"),
        ("params.a > 1", "compare a quoted string"),
        ("params.a IN ('x')", "attributes.run_id only"),
        ("datasets.name = 'x'", "unknown name"),
        ("attributes.color = 'red'", "unknown attribute"),
        ("metrics.a IS NULL", "unsupported operator"),
        ("metrics.a >", "needs a value"),
        ("metrics.a > 1 AND", "missing after AND"),
        ("metrics.a > 1 metrics.b < 2", "expected AND"),
        ("params.a = 'x' ; DROP", "cannot read"),
        ("run_id IN ('a', 'b'", "IN list"),
        ("x" * 4001, "at most 4000"),
    ],
)
def test_a_filter_it_does_not_support_is_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(MlflowRefusal) as refused:
        parse_filter(text)
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
    assert refused.value.status == 400
    assert said in str(refused.value)


def test_order_by_sorts_numbers_and_puts_runs_without_the_value_last() -> None:
    runs = newest_first(RUNS)
    by_rmse = ordered(runs, parse_order(["metrics.rmse ASC"]))
    assert [r.info["run_id"] for r in by_rmse] == ["a", "b", "c"]  # NaN sorts last
    desc = ordered(runs, parse_order(["metrics.rmse DESC"]))
    assert [r.info["run_id"] for r in desc] == ["b", "a", "c"]
    assert [r.info["run_id"] for r in runs] == ["c", "b", "a"]
    by_param = ordered(runs, parse_order(["params.model", "attributes.start_time DESC"]))
    assert [r.info["run_id"] for r in by_param] == ["c", "b", "a"]
    with pytest.raises(MlflowRefusal):
        parse_order(["attributes.colour"])
    with pytest.raises(MlflowRefusal):
        parse_order("metrics.rmse")  # a list, as MLflow sends it


def test_pages_follow_their_token_to_the_end() -> None:
    items = list(range(7))
    first, token = page(items, 3, None)
    second, token2 = page(items, 3, token)
    third, token3 = page(items, 3, token2)
    assert (first, second, third, token3) == ([0, 1, 2], [3, 4, 5], [6], None)
    for bad in ("not-a-token", "eyJvZmZzZXQiOiAtMX0=", "e30="):  # junk, offset -1, {}
        with pytest.raises(MlflowRefusal):
            page(items, 3, bad)
    for limit in (0, 50_001, "x", True):
        with pytest.raises(MlflowRefusal):
            page(items, limit, None)


def test_a_run_token_does_not_open_the_mlflow_routes() -> None:
    """The routes are the admin's: a run token (which opens /api/v1 for its session) is
    refused under /mlflow, in MLflow's error shape, so the client raises."""

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse({"reached": scope["path"]})(scope, receive, send)

    def verify(token: str) -> object | None:
        return object() if token == "run-token" else None

    app = BearerAuth(inner, token="admin-token", verify_run_token=verify)
    client = TestClient(app, base_url="http://127.0.0.1")  # no lifespan: a bare app
    run = {"authorization": "Bearer run-token"}
    admin = {"authorization": "Bearer admin-token"}
    assert client.get("/api/v1/tasks", headers=run).status_code == 200
    refused = client.get("/mlflow/api/2.0/mlflow/experiments/search", headers=run)
    assert refused.status_code == 401
    assert refused.json()["error_code"] == "UNAUTHENTICATED"
    opened = client.get("/mlflow/api/2.0/mlflow/experiments/search", headers=admin)
    assert opened.json() == {"reached": "/mlflow/api/2.0/mlflow/experiments/search"}
