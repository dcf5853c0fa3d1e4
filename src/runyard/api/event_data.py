"""The ``data`` of each Server-Sent Event, in the shapes AxonX 0.2.2 clients validate.

Those clients read only the ``data:`` line and pick the model by its ``kind`` field, so
every event's data names its kind (the ``event:`` line says it too, for runyard's own
clients). A ``progress`` event must hold only the fields of AxonX's step model, which
forbids any other: a step is sent as its name, times and percentage plus a ``state``
derived from them. A ``log`` event is the log window; a ``result`` event is the Job
envelope (``answer``, ``success``, ``metadata``).

>>> progress_data({"kind": "progress", "name": "fit", "started_at": "2026-01-01T00:00:00Z",
...     "finished_at": None, "percentage": 40.0, "note": "ours"})["state"]
'running'
>>> sorted(result_data("x", True))
['answer', 'kind', 'metadata', 'success']
"""

from __future__ import annotations

from typing import Any

from runyard.api.envelope import job_response

# the fields of AxonX's TaskStepStatus that a runyard step can carry
STEP_FIELDS = ("name", "label", "parent", "percentage", "started_at", "finished_at")


def progress_data(event: dict[str, Any]) -> dict[str, Any]:
    """One step event of ``events.jsonl`` as a ``progress`` event's data."""
    data: dict[str, Any] = {"kind": "progress"}
    data.update({key: event[key] for key in STEP_FIELDS if key in event})
    data["state"] = step_state(event)
    return data


def step_state(step: dict[str, Any]) -> str:
    """``done`` once finished, ``running`` once started, else ``pending``."""
    if step.get("finished_at"):
        return "done"
    if step.get("started_at"):
        return "running"
    return "pending"


def log_data(chunk: dict[str, Any]) -> dict[str, Any]:
    """A log window (``TaskLogChunk`` as JSON) as a ``log`` event's data."""
    return {**chunk, "kind": "log"}


def result_data(
    answer: Any, success: bool, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The final ``result`` event's data: the Job envelope with its kind."""
    return {**job_response(answer, success, metadata), "kind": "result"}
