"""``research_analysis`` (analysis): rank trained models by their cross-validated R², straight
from their research_train upstreams (no backtest needed): the short pipeline of the docs."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType
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
            rows = sorted((_row(source) for source in sources), key=lambda r: -r["cv_r2"])
        with run.step("write"):
            (run.task_dir / "comparison.md").write_text(_markdown(inputs.title, rows))
            (run.task_dir / "summary.json").write_text(json.dumps({"models": rows}, indent=2))
            run.record_artifact("comparison", "comparison.md")
            run.record_artifact("summary", "summary.json")
        return AnalysisOutput(best_task=rows[0]["task_id"], models=len(rows))


def _row(source: Upstream) -> dict[str, Any]:
    metrics = json.loads(source.read("metrics"))
    return {"task_id": source.task_id, "model": metrics["model"], "params": metrics["params"],
            "cv_r2": metrics["cv_r2"], "train_r2": metrics["train_r2"]}  # fmt: skip


def _markdown(title: str, rows: list[dict[str, Any]]) -> str:
    header = ["| rank | model | cv R² | train R² | task |", "|---|---|---|---|---|"]
    lines = [f"# {title}", "", *header]
    for rank, row in enumerate(rows, start=1):
        lines.append(f"| {rank} | {row['model']} | {row['cv_r2']:.3f} | {row['train_r2']:.3f} "
                     f"| `{row['task_id']}` |")  # fmt: skip
    return "\n".join(lines) + "\n"
