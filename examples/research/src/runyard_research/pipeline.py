"""The research pipeline: etl -> train (ridge, random forest) -> backtest (each) -> report.

    runyard pipeline run examples/research/src/runyard_research/pipeline.py dataset=wine
    runyard example research --dataset wine          # the same, with progress bars

Each step waits for the steps it names (``depends_on``), and they become its lineage
(``source_tasks``), through which it reads their recorded artifacts
(:mod:`runyard_research.upstream`).
"""

from __future__ import annotations

from runyard import Pipeline

MODELS = {
    "ridge": {"model": "ridge", "alpha": 1.0},
    "forest": {"model": "random_forest", "n_estimators": 40, "max_depth": 5},
}

pipe = Pipeline("research", params={"dataset": "diabetes"})
etl = pipe.task("research_etl", key="etl", dataset=pipe.param("dataset"))
backtests = []
for label, inputs in MODELS.items():
    train = pipe.task("research_train", key=f"train-{label}", depends_on=[etl], **inputs)
    backtests.append(pipe.task("research_backtest", key=f"backtest-{label}", depends_on=[train]))
pipe.task("research_report", key="report", depends_on=backtests)
