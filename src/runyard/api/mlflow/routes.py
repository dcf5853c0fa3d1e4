"""The routes of MLflow's tracking REST API that its Python client calls, under ``/mlflow``.

With ``MLFLOW_TRACKING_URI=http://<host>:<port>/mlflow`` and ``MLFLOW_TRACKING_TOKEN``
set to the server's token, MLflow's own client (``mlflow`` / ``mlflow-skinny``) records
and reads runyard tasks (see ``docs/tracking.md``, "MLflow's client")::

    /mlflow/api/2.0/mlflow/experiments/{get-by-name,get,create,search,set-experiment-tag}
    /mlflow/api/2.0/mlflow/runs/{create,update,get,search,log-metric,log-parameter,
                                 log-batch,set-tag,delete-tag}
    /mlflow/api/2.0/mlflow/metrics/get-history
    /mlflow/api/2.0/mlflow-artifacts/artifacts[/<exp>/<run>/artifacts/<path>]

Every other path under ``/mlflow`` answers 404 ``ENDPOINT_NOT_FOUND`` (logged models,
traces, the model registry, deleting runs and experiments are not served). Refusals are
MLflow's error object (:mod:`runyard.api.mlflow.errors`). The routes are the admin's: a
run token is refused here (:mod:`runyard.api.auth`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from runyard.api.downloads import download
from runyard.api.jsonbody import parse_json_body
from runyard.api.mlflow import artifacts, experiments, record, search
from runyard.api.mlflow.errors import ENDPOINT_NOT_FOUND, INVALID, MlflowRefusal
from runyard.api.mlflow.lookup import RunRef, find_run, runs_of_tasks
from runyard.api.mlflow.runview import (
    metric_json,
    metric_summaries,
    run_info,
    run_json,
    run_param_texts,
    run_tags,
)
from runyard.api.services import Services
from runyard.errors import BodyTooLarge
from runyard.tracking.reading import read_points
from runyard.workspace.space import is_space_error, require_space, storage_error

API = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
EXPERIMENT_TEXTS = frozenset({"name", "experiment_id"})
EXPERIMENT_NUMBERS = frozenset({"creation_time", "last_update_time"})


async def json_body(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object (``{}`` when it has no body)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"Request body exceeds the limit of {limit} bytes")
    data = parse_json_body(body) if body.strip() else {}
    if not isinstance(data, dict):
        raise MlflowRefusal(INVALID, "The request body must be a JSON object")
    return data


def _text(data: dict[str, Any], name: str, required: bool = True) -> str | None:
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise MlflowRefusal(INVALID, f"Missing value for required parameter '{name}'")
        return None
    if not isinstance(value, str):
        raise MlflowRefusal(INVALID, f"Parameter '{name}' must be a string")
    return value


def _pairs(items: object, what: str) -> list[tuple[object, object]]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise MlflowRefusal(INVALID, f"{what} must be a list of {{key, value}} objects")
    return [(i.get("key"), i.get("value")) for i in items]


def build_mlflow_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["mlflow"], include_in_schema=False)
    limit = services.settings.max_body_bytes
    min_free = services.settings.min_free_mb

    async def body_of(request: Request) -> dict[str, Any]:
        if request.method == "GET":
            return _query(request)
        return await json_body(request, limit)

    def threaded(fn: Any) -> Any:
        async def route(request: Request) -> Any:
            data = await body_of(request)
            with full_disk_refused(fn.__name__):
                return await run_in_threadpool(fn, services, data)

        return route

    for path, fn, methods in _ROUTES:
        router.add_api_route(f"{API}/{path}", threaded(fn), methods=methods)

    @router.get(ARTIFACTS)
    async def list_artifacts(request: Request) -> Any:
        path = request.query_params.get("path", "")
        target = await run_in_threadpool(artifacts.resolve, services, path)
        return {"files": await run_in_threadpool(artifacts.list_artifacts, target)}

    @router.get(ARTIFACTS + "/{path:path}")
    async def get_artifact(path: str) -> Any:
        target = await run_in_threadpool(artifacts.resolve, services, path)
        return download(await run_in_threadpool(artifacts.open_artifact, target))

    @router.put(ARTIFACTS + "/{path:path}")
    async def put_artifact(request: Request, path: str) -> Any:
        target = await run_in_threadpool(artifacts.resolve, services, path)
        await run_in_threadpool(require_space, services.workspace.root, min_free)
        with full_disk_refused("upload an artifact"):
            await artifacts.upload(services, target, request.stream())
        return {}

    @router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def not_served(rest: str) -> Response:
        raise MlflowRefusal(ENDPOINT_NOT_FOUND, f"runyard does not serve /mlflow/{rest[:200]}")

    return router


@contextlib.contextmanager
def full_disk_refused(what: str) -> Iterator[None]:
    """A full disk met while recording answers 507 (InsufficientStorage), not a 500."""
    try:
        yield
    except OSError as exc:
        if is_space_error(exc):
            raise storage_error(exc, what) from exc
        raise


def _query(request: Request) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if key in data:
            data[key] = [*data[key], value] if isinstance(data[key], list) else [data[key], value]
        else:
            data[key] = value
    return data


# --- experiments -----------------------------------------------------------------------


def get_experiment_by_name(services: Services, data: dict[str, Any]) -> Any:
    experiment = experiments.get_by_name(services, _text(data, "experiment_name"))
    return {"experiment": experiment.to_json()}


def get_experiment(services: Services, data: dict[str, Any]) -> Any:
    experiment = experiments.get_by_id(services, _text(data, "experiment_id"))
    return {"experiment": experiment.to_json()}


def create_experiment(services: Services, data: dict[str, Any]) -> Any:
    tags = dict(record.check_tag(k, v) for k, v in _pairs(data.get("tags"), "tags"))
    experiment = experiments.create(services, _text(data, "name"), tags)
    return {"experiment_id": experiment.experiment_id}


def set_experiment_tag(services: Services, data: dict[str, Any]) -> Any:
    experiment = experiments.get_by_id(services, _text(data, "experiment_id"))
    key, value = record.check_tag(data.get("key"), data.get("value"))
    experiments.set_tag(services, experiment, key, value)
    return {}


def search_experiments(services: Services, data: dict[str, Any]) -> Any:
    clauses = search.parse_filter(data.get("filter"), EXPERIMENT_TEXTS, EXPERIMENT_NUMBERS)
    order = search.parse_order(data.get("order_by"), EXPERIMENT_TEXTS | EXPERIMENT_NUMBERS)
    if _view(data.get("view_type")) == "DELETED_ONLY":
        return {"experiments": []}
    found = experiments.all_experiments(services)
    rows = [search.Row(e.to_json(), {}, {}, e.tags) for e in found]
    rows = [row for row in rows if search.matches(row, clauses)]
    if order:
        rows = search.ordered(rows, order)
    page, token = search.page(rows, data.get("max_results"), data.get("page_token"))
    answer: dict[str, Any] = {"experiments": [row.info for row in page]}
    if token:
        answer["next_page_token"] = token
    return answer


def _view(view: object) -> str:
    names = {1: "ACTIVE_ONLY", 2: "DELETED_ONLY", 3: "ALL"}
    if isinstance(view, int) and not isinstance(view, bool):
        return names.get(view, "ACTIVE_ONLY")
    return str(view or "ACTIVE_ONLY").upper()


# --- runs ------------------------------------------------------------------------------


def create_run(services: Services, data: dict[str, Any]) -> Any:
    experiment = experiments.get_by_id(services, data.get("experiment_id") or "0")
    require_space(services.workspace.root, services.settings.min_free_mb)  # new work: 507
    tags = dict(record.check_tag(k, v) for k, v in _pairs(data.get("tags"), "tags"))
    name = _text(data, "run_name", required=False) or tags.get("mlflow.runName")
    user = _text(data, "user_id", required=False) or ""
    ref = record.create_run(services, experiment, name, tags, user)
    return {"run": run_json(ref)}


def update_run(services: Services, data: dict[str, Any]) -> Any:
    run_id = data.get("run_id") or data.get("run_uuid")
    name = _text(data, "run_name", required=False)
    ref = find_run(services, run_id)
    if name is not None and name != ref.task_id.rsplit("#", 1)[-1]:
        raise MlflowRefusal(INVALID, f"A run's name is part of its task id ({ref.task_id}) "
                            "and cannot change")  # fmt: skip
    ref = record.update_run(services, run_id, data.get("status"), data.get("end_time"))
    return {"run_info": run_info(ref)}


def get_run(services: Services, data: dict[str, Any]) -> Any:
    return {"run": run_json(find_run(services, data.get("run_id") or data.get("run_uuid")))}


def _run_id(data: dict[str, Any]) -> object:
    return data.get("run_id") or data.get("run_uuid")


def log_metric(services: Services, data: dict[str, Any]) -> Any:
    record.log_batch(services, _run_id(data), [record.metric_point(data)], {}, {})
    return {}


def log_param(services: Services, data: dict[str, Any]) -> Any:
    params = dict([record.check_param(data.get("key"), data.get("value"))])
    record.log_batch(services, _run_id(data), [], params, {})
    return {}


def set_tag(services: Services, data: dict[str, Any]) -> Any:
    tags = dict([record.check_tag(data.get("key"), data.get("value"))])
    record.log_batch(services, _run_id(data), [], {}, tags)
    return {}


def delete_tag(services: Services, data: dict[str, Any]) -> Any:
    record.delete_tag(services, _run_id(data), _text(data, "key") or "")
    return {}


def log_batch(services: Services, data: dict[str, Any]) -> Any:
    metrics = data.get("metrics") or []
    params = _pairs(data.get("params"), "params")
    tags = _pairs(data.get("tags"), "tags")
    if not isinstance(metrics, list) or len(metrics) > MAX_BATCH_METRICS:
        raise MlflowRefusal(INVALID, f"A batch holds a list of at most {MAX_BATCH_METRICS} "
                            "metrics")  # fmt: skip
    if len(params) > MAX_BATCH_PARAMS or len(tags) > MAX_BATCH_TAGS:
        raise MlflowRefusal(INVALID, f"A batch holds at most {MAX_BATCH_PARAMS} params and "
                            f"{MAX_BATCH_TAGS} tags")  # fmt: skip
    points = [record.metric_point(m) for m in metrics]
    checked_params = dict(record.check_param(k, v) for k, v in params)
    checked_tags = dict(record.check_tag(k, v) for k, v in tags)
    record.log_batch(services, _run_id(data), points, checked_params, checked_tags)
    return {}


def get_metric_history(services: Services, data: dict[str, Any]) -> Any:
    ref = find_run(services, _run_id(data))
    key = _text(data, "metric_key") or ""
    # by step: the client's asynchronous logging sends batches side by side, so points
    # arrive out of order (a stable sort keeps the order received within one step)
    ordered = sorted(read_points(ref.folder, name=key), key=lambda p: p.step)
    points = [metric_json(p) for p in ordered]
    if data.get("max_results") is None and not data.get("page_token"):
        return {"metrics": points}
    page, token = search.page(points, data.get("max_results"), data.get("page_token"))
    return {"metrics": page, "next_page_token": token} if token else {"metrics": page}


def search_runs(services: Services, data: dict[str, Any]) -> Any:
    clauses = search.parse_filter(data.get("filter"))
    order = search.parse_order(data.get("order_by"))
    ids = data.get("experiment_ids") or []
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not ids:
        raise MlflowRefusal(INVALID, "experiment_ids must name at least one experiment")
    tasks = {experiments.task_of_id(str(i)) for i in ids}
    if _view(data.get("run_view_type")) == "DELETED_ONLY":
        return {"runs": []}
    refs = {row_ref.run_id: row_ref for row_ref in runs_of_tasks(services, tasks)}
    rows = [_row(ref) for ref in refs.values()]
    rows = search.newest_first([r for r in rows if search.matches(r, clauses)])
    rows = search.ordered(rows, order)
    page, token = search.page(rows, data.get("max_results"), data.get("page_token"))
    answer: dict[str, Any] = {"runs": [run_json(refs[row.info["run_id"]]) for row in page]}
    if token:
        answer["next_page_token"] = token
    return answer


def _row(ref: RunRef) -> search.Row:
    lasts = {name: s.get("last") for name, s in metric_summaries(ref).items()}
    return search.Row(run_info(ref), lasts, run_param_texts(ref), run_tags(ref.status))


def search_logged_models(services: Services, data: dict[str, Any]) -> Any:
    """runyard keeps no logged models: the client asks for them when it lists a run's
    artifacts (a model's files would be among them), and finds none."""
    return {"models": []}


_ROUTES = (
    ("experiments/get-by-name", get_experiment_by_name, ["GET"]),
    ("experiments/get", get_experiment, ["GET"]),
    ("experiments/create", create_experiment, ["POST"]),
    ("experiments/search", search_experiments, ["GET", "POST"]),
    ("experiments/set-experiment-tag", set_experiment_tag, ["POST"]),
    ("runs/create", create_run, ["POST"]),
    ("runs/update", update_run, ["POST"]),
    ("runs/get", get_run, ["GET"]),
    ("runs/log-metric", log_metric, ["POST"]),
    ("runs/log-parameter", log_param, ["POST"]),
    ("runs/log-batch", log_batch, ["POST"]),
    ("runs/set-tag", set_tag, ["POST"]),
    ("runs/delete-tag", delete_tag, ["POST"]),
    ("runs/search", search_runs, ["GET", "POST"]),
    ("metrics/get-history", get_metric_history, ["GET"]),
    ("logged-models/search", search_logged_models, ["POST"]),
)
