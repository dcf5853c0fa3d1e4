"""``research_backtest`` (backtest): score the held-out test set of the dataset a model was
trained on, and write ``predictions.parquet``, ``backtest.json`` and ``backtest.png``.

The model comes from the upstream research_train task named in ``source_tasks``; the test
set from *that* task's own upstream research_etl task, found through lineage."""

from __future__ import annotations

import io
import json
import pickle

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType
from runyard_research.etl import TARGET
from runyard_research.plots import scatter_and_residuals
from runyard_research.upstream import ETL, TRAIN, UpstreamError, upstreams


class BacktestInput(TaskInput):
    plot_dpi: int = Field(100, ge=50, le=300, description="Resolution of backtest.png")
    max_points: int = Field(
        2000, ge=10, le=100_000, description="At most this many points drawn in the plot"
    )


class BacktestOutput(TaskOutput):
    model: str = Field(description="Model family of the upstream train task")
    test_r2: float = Field(description="R^2 on the held-out rows")
    rmse: float = Field(description="Root mean squared error on the held-out rows")
    mae: float = Field(description="Mean absolute error on the held-out rows")
    rows: int = Field(description="Held-out rows scored")


class Backtest(Task):
    """Score the held-out test set with the model of one upstream research_train task
    (given in source_tasks; the test set is that model's own etl upstream), write the
    predictions and a matplotlib plot of predicted against actual values."""

    name = "research_backtest"
    task_type = TaskType.BACKTEST
    Input = BacktestInput
    Output = BacktestOutput
    steps = ("read", "score", "plot", "write")

    def run(self, inputs: BacktestInput, run: TaskRun) -> BacktestOutput:
        import pandas as pd

        with run.step("read"):
            (train,) = upstreams(run, inputs.source_tasks, TRAIN)
            etl = dataset_of(train)
            # the pickle is loaded only after its bytes matched the recorded sha256
            model = pickle.loads(train.read("model"))
            test = pd.read_parquet(io.BytesIO(etl.read("test")))
            run.log(f"Scoring {len(test)} rows of {etl.task_id} with {train.task_id}")
        with run.step("score"):
            scores, predictions = score(model, test)
        with run.step("plot"):
            title = f"{train.outputs.get('model', 'model')} on {etl.outputs.get('dataset', '')}"
            png = scatter_and_residuals(predictions, title, inputs.max_points, inputs.plot_dpi)
            (run.task_dir / "backtest.png").write_bytes(png)
        with run.step("write"):
            predictions.to_parquet(run.task_dir / "predictions.parquet", index=False)
            summary = {
                **scores,
                "model": train.outputs.get("model"),
                "params": train.outputs.get("params"),
                "cv_r2": train.outputs.get("cv_r2"),
                "train_task": train.task_id,
                "dataset_task": etl.task_id,
            }
            (run.task_dir / "backtest.json").write_text(json.dumps(summary, indent=2))
            for name, path in (
                ("predictions", "predictions.parquet"),
                ("backtest", "backtest.json"),
                ("plot", "backtest.png"),
            ):
                run.record_artifact(name, path)
        return BacktestOutput(model=str(train.outputs.get("model")), **scores)


def dataset_of(train) -> object:  # type: ignore[no-untyped-def]
    """The research_etl task the model was trained on (the train task's own upstream)."""
    parents = train.parents(ETL)
    if len(parents) != 1:
        raise UpstreamError(f"Upstream task {train.task_id} does not name one research_etl task")
    return parents[0]


def score(model, test):  # type: ignore[no-untyped-def]
    """Metrics and a frame of actual, predicted and residual values."""
    import numpy as np
    import pandas as pd

    actual = test[TARGET].to_numpy(dtype=float)
    predicted = np.asarray(model.predict(test.drop(columns=[TARGET])), dtype=float)
    residual = actual - predicted
    spread = float(((actual - actual.mean()) ** 2).sum()) or 1.0
    frame = pd.DataFrame({"actual": actual, "predicted": predicted, "residual": residual})
    scores = {
        "test_r2": 1.0 - float((residual**2).sum()) / spread,
        "rmse": float(np.sqrt((residual**2).mean())),
        "mae": float(np.abs(residual).mean()),
        "rows": len(test),
    }
    return scores, frame
