"""The ``detail`` of a status answer, as AxonX 0.2.2 clients ask for it.

``"full"`` is the whole status record: the seed's answer and the default. ``"summary"`` is
what a list or a progress line needs without copying the task's inputs or outputs: the
status without ``config``, ``result`` and ``steps``, the error cut to 1,000 characters,
plus ``display_name`` (the instance's ``task_name``) and ``step_progress`` (the first
unfinished step, else the last, counted among all steps).

>>> summary = summarize({"task_id": "base#demo#a", "task_name": "a", "config": {"x": 1},
...     "result": {"y": 2}, "error": "", "steps": [
...     {"name": "load", "finished_at": "t", "percentage": 100.0},
...     {"name": "fit", "finished_at": None, "percentage": 40.0}]})
>>> summary["step_progress"], "config" in summary, "result" in summary
({'current': 2, 'total': 2, 'name': 'fit', 'percentage': 40.0}, False, False)
"""

from __future__ import annotations

from typing import Any

SUMMARY_DROPS = ("config", "result", "steps")
MAX_ERROR = 1000
MAX_NAME = 256


def with_detail(status: dict[str, Any], detail: str) -> dict[str, Any]:
    """``status`` (a status as JSON) in the shape ``detail`` names."""
    return summarize(status) if detail == "summary" else status


def summarize(status: dict[str, Any]) -> dict[str, Any]:
    """The ``summary`` shape of one status (see the module docstring)."""
    summary = {key: value for key, value in status.items() if key not in SUMMARY_DROPS}
    summary["error"] = str(status.get("error") or "")[:MAX_ERROR]
    summary["display_name"] = display_name(status)[:MAX_NAME]
    summary["step_progress"] = _step_progress(status.get("steps") or [])
    return summary


def display_name(status: dict[str, Any]) -> str:
    """The instance name (``config.task_name``: given or generated), else the task's."""
    config = status.get("config")
    given = config.get("task_name") if isinstance(config, dict) else None
    return str(given or status.get("task_name") or "")


def _step_progress(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not steps:
        return None
    index = next(
        (i for i, step in enumerate(steps) if step.get("finished_at") is None), len(steps) - 1
    )
    step = steps[index]
    return {
        "current": index + 1,
        "total": len(steps),
        "name": str(step.get("name", ""))[:MAX_NAME],
        "percentage": step.get("percentage"),
    }
