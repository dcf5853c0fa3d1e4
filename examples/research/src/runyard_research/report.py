"""``research_report`` (analysis): the last task of the pipeline. It compares the runs of
its upstream research_backtest tasks in a Markdown report that embeds their figures, and
the training runs behind them through the compare API's own function
(:mod:`runyard_research.tracked`): the params that differ, the cross-validated R² over the
folds, and the route of the Studio's compare view of them."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType
from runyard_research.plots import comparison_bars
from runyard_research.tracked import compare_tasks, differing_params, studio_compare_route
from runyard_research.upstream import BACKTEST, TRAIN, Upstream, upstreams

LOWER_IS_BETTER = {"rmse", "mae"}


class ReportInput(TaskInput):
    title: str = Field(
        "Research pipeline report", min_length=1, max_length=120, description="Report heading"
    )
    rank_by: Literal["test_r2", "rmse", "mae"] = Field(
        "test_r2", description="Metric that ranks the runs (R^2 higher, errors lower is better)"
    )
    plot_dpi: int = Field(100, ge=50, le=300, description="Resolution of comparison.png")


class ReportOutput(TaskOutput):
    best_task: str = Field(description="The backtest task that ranks first")
    runs: int = Field(description="Runs compared")


class Report(Task):
    """Compare 1 to 8 upstream research_backtest runs (given in source_tasks): a Markdown
    report with a ranked metrics table, a comparison chart and every run's backtest plot."""

    name = "research_report"
    task_type = TaskType.ANALYSIS
    Input = ReportInput
    Output = ReportOutput
    steps = ("read", "compare", "write")

    def run(self, inputs: ReportInput, run: TaskRun) -> ReportOutput:
        with run.step("read"):
            sources = upstreams(run, inputs.source_tasks, BACKTEST, count=(1, 8))
            rows = [_row(index, source) for index, source in enumerate(sources, start=1)]
            figures = run.task_dir / "figures"
            figures.mkdir(exist_ok=True)
            for row, source in zip(rows, sources, strict=True):
                (figures / row["figure"]).write_bytes(source.read("plot"))
        with run.step("compare"):
            reverse = inputs.rank_by not in LOWER_IS_BETTER
            rows.sort(key=lambda row: row[inputs.rank_by], reverse=reverse)
            chart = comparison_bars(
                [r["label"] for r in rows], [r["test_r2"] for r in rows], "test R2", inputs.plot_dpi
            )
            (figures / "comparison.png").write_bytes(chart)
            trains = training_runs(run, sources)
        with run.step("write"):
            text = markdown(inputs, rows) + training_markdown(trains)
            (run.task_dir / "report.md").write_text(text, encoding="utf-8")
            (run.task_dir / "summary.json").write_text(
                json.dumps({"rank_by": inputs.rank_by, "runs": rows, "training": trains}, indent=2)
            )
            run.record_artifact("report", "report.md")
            run.record_artifact("summary", "summary.json")
            run.record_artifact("comparison", "figures/comparison.png")
            for row in rows:
                run.record_artifact(f"plot-{row['index']}", f"figures/{row['figure']}")
        return ReportOutput(best_task=rows[0]["task_id"], runs=len(rows))


def _row(index: int, source: Upstream) -> dict[str, Any]:
    summary = json.loads(source.read("backtest"))
    model = str(summary.get("model") or "model")
    params = summary.get("params") or {}
    label = f"{index}. {model}"
    return {
        "index": index, "task_id": source.task_id, "label": label, "model": model,
        "params": params, "cv_r2": summary.get("cv_r2"), "test_r2": summary["test_r2"],
        "rmse": summary["rmse"], "mae": summary["mae"], "rows": summary.get("rows"),
        "dataset_task": summary.get("dataset_task"), "figure": f"backtest-{index}.png",
    }  # fmt: skip


def training_runs(run: TaskRun, sources: list[Upstream]) -> dict[str, Any]:
    """The train tasks behind the backtests compared: the params that differ, each one's
    ``cv_r2`` over its folds, and the Studio's compare route of them."""
    ids = list(dict.fromkeys(p.task_id for s in sources for p in s.parents(TRAIN)))
    table = compare_tasks(run, ids)
    folds = next((row["values"] for row in table["metrics"] if row["name"] == "cv_r2"), [])
    return {"task_ids": ids, "differing_params": differing_params(table),
            "cv_r2_folds": folds, "studio_compare": studio_compare_route(ids)}  # fmt: skip


def training_markdown(trains: dict[str, Any]) -> str:
    """The report's last section: the training runs side by side."""
    ids = trains["task_ids"]
    lines = ["", "## Training runs", "", "| param | " + " | ".join(f"`{t}`" for t in ids) + " |",
             "|---|" + "---|" * len(ids)]  # fmt: skip
    for row in trains["differing_params"]:
        values = " | ".join(_cell(json.dumps(value)) for value in row["values"])
        lines.append(f"| {_cell(row['name'])} | {values} |")
    folds = trains["cv_r2_folds"] or [None] * len(ids)
    spreads = " | ".join(
        f"{_number(f['min'])} to {_number(f['max'])} ({f.get('count')} folds)" if f else "-"
        for f in folds
    )
    lines += [f"| cv R² over folds | {spreads} |", "",
              f"Compare them in the Studio: `#{trains['studio_compare']}` (after the server's "
              "address; `runyard example research` prints the link).", ""]  # fmt: skip
    return "\n".join(lines)


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(inputs: ReportInput, rows: list[dict[str, Any]]) -> str:
    """The report: ranking table, comparison chart, then each run's plot."""
    best = rows[0]
    lines = [
        f"# {inputs.title}", "",
        f"{len(rows)} run(s) compared by **{inputs.rank_by}**. Best: **{best['label']}** "
        f"(`{best['task_id']}`), test R2 {_number(best['test_r2'])}.", "",
        "## Runs", "",
        "| rank | run | parameters | CV R2 | test R2 | RMSE | MAE |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]  # fmt: skip
    for rank, row in enumerate(rows, start=1):
        params = ", ".join(f"{k}={v}" for k, v in sorted(row["params"].items()))
        lines.append(
            f"| {rank} | {_cell(row['label'])} | {_cell(params)} | {_number(row['cv_r2'])} | "
            f"{_number(row['test_r2'])} | {_number(row['rmse'])} | {_number(row['mae'])} |"
        )
    lines += ["", "## Comparison", "", "![Test R2 by run](figures/comparison.png)", ""]
    for row in sorted(rows, key=lambda r: r["index"]):
        lines += [
            f"### {row['label']}",
            "",
            f"- backtest: `{row['task_id']}`",
            f"- dataset: `{row['dataset_task']}`, {row['rows']} held-out rows",
            "",
            f"![Backtest of {row['label']}](figures/{row['figure']})",
            "",
        ]
    return "\n".join(lines)
