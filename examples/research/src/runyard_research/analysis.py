"""``research_analysis`` (analysis): rank trained models by their cross-validated R², straight
from their research_train upstreams (no backtest needed): the short pipeline of the docs.

The models are compared through the compare API's own function
(:mod:`runyard_research.tracked`): their params side by side (those that differ listed),
their tracked ``cv_r2_mean`` and ``train_r2``, and the range of ``cv_r2`` over the folds.
A train run from before it logged metrics is read from its ``metrics.json`` instead.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType
from runyard_research.tracked import compare_tasks, differing_params, last, studio_compare_route
from runyard_research.upstream import TRAIN, Upstream, upstreams


class AnalysisInput(TaskInput):
    title: str = Field("Model comparison", min_length=1, max_length=120, description="Heading")


class AnalysisOutput(TaskOutput):
    best_task: str = Field(description="The research_train task with the best cv R2")
    models: int = Field(description="Models compared")


class Analysis(Task):
    """Compare 1 to 8 upstream research_train runs (their metrics, in source_tasks) by
    cross-validated R²: a ranked Markdown table and summary.json."""

    name = "research_analysis"
    task_type = TaskType.ANALYSIS
    Input = AnalysisInput
    Output = AnalysisOutput
    steps = ("read", "write")

    def run(self, inputs: AnalysisInput, run: TaskRun) -> AnalysisOutput:
        with run.step("read"):
            sources = upstreams(run, inputs.source_tasks, TRAIN, count=(1, 8))
            ids = [source.task_id for source in sources]
            table = compare_tasks(run, ids)
            rows = [_row(s, item) for s, item in zip(sources, table["items"], strict=True)]
            rows.sort(key=lambda r: -r["cv_r2"])
        with run.step("write"):
            differing = differing_params(table)
            route = studio_compare_route(ids)
            text = _markdown(inputs.title, rows, differing, route)
            (run.task_dir / "comparison.md").write_text(text)
            summary = {"models": rows, "differing_params": differing, "studio_compare": route}
            (run.task_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            run.record_artifact("comparison", "comparison.md")
            run.record_artifact("summary", "summary.json")
        return AnalysisOutput(best_task=rows[0]["task_id"], models=len(rows))


def _row(source: Upstream, item: dict[str, Any]) -> dict[str, Any]:
    """One model's row: its tracked metrics, else (a run that logged none) its metrics.json."""
    folds = item["metrics"].get("cv_r2") or {}
    row = {"task_id": source.task_id, "model": item["params"].get("model"),
           "params": item["params"], "cv_r2": last(item, "cv_r2_mean"),
           "train_r2": last(item, "train_r2"), "cv_r2_folds": folds.get("count"),
           "cv_r2_min": folds.get("min"), "cv_r2_max": folds.get("max")}  # fmt: skip
    if row["cv_r2"] is None or row["train_r2"] is None:
        metrics = json.loads(source.read("metrics"))
        row.update(model=metrics["model"], cv_r2=metrics["cv_r2"], train_r2=metrics["train_r2"])
    return row


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "-"


def _markdown(
    title: str, rows: list[dict[str, Any]], differing: list[dict[str, Any]], route: str
) -> str:
    header = ["| rank | model | cv R² | cv R² over folds | train R² | task |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    lines = [f"# {title}", "", *header]
    for rank, row in enumerate(rows, start=1):
        spread = f"{_number(row['cv_r2_min'])} to {_number(row['cv_r2_max'])}"
        lines.append(f"| {rank} | {row['model']} | {_number(row['cv_r2'])} | {spread} "
                     f"| {_number(row['train_r2'])} | `{row['task_id']}` |")  # fmt: skip
    if differing:
        names = ", ".join(f"`{row['name']}`" for row in differing)
        lines += ["", f"Params that differ between the models: {names}."]
    lines += ["", f"Compare them in the Studio: `#{route}` (after the server's address)."]
    return "\n".join(lines) + "\n"
