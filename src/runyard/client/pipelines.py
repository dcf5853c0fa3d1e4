"""What the clients send and read for pipeline runs (``/api/v1/pipelines/runs``).

A pipeline is taken as it describes itself (its ``wire(**params)``, see
:class:`runyard.pipelines.build.Pipeline`), or as that wire form already built (a dict),
so the client imports nothing of the pipelines package.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

RUNS = "/api/v1/pipelines/runs"
UNFINISHED = "running"


def run_body(pipeline: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The request body of a run of ``pipeline`` with ``params`` over its defaults."""
    if isinstance(pipeline, dict):
        given = dict(pipeline)
        if params:
            given["params"] = {**given.get("params", {}), **params}
        return given
    wire = getattr(pipeline, "wire", None)
    if not callable(wire):
        raise TypeError(f"run_pipeline() takes a runyard.Pipeline, got {type(pipeline).__name__}")
    body: dict[str, Any] = wire(**params)
    return body


def run_path(run_id: str, action: str = "") -> str:
    path = f"{RUNS}/{quote(run_id, safe='')}"
    return f"{path}/{action}" if action else path


def finished(run: dict[str, Any]) -> bool:
    """Whether every step of ``run`` (an answer of the server) has ended."""
    return run.get("state") != UNFINISHED
