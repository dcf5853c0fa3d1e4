"""``research_train`` (train): fit a model on its upstream etl task's ``train.parquet``
and write ``model.pkl`` plus ``metrics.json``.

It is tracked as an experiment: each cross-validation fold's R² is the metric ``cv_r2`` at
step = the fold's number, their mean ``cv_r2_mean`` and the final fit's ``train_r2`` are
metrics too, and the model family, its hyper-parameters and the data's shape are logged
params (beside the inputs, which are params already). ``runyard metrics``,
``runyard compare`` and the Studio read them back."""

from __future__ import annotations

import io
import json
import pickle
from typing import Literal

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType
from runyard_research.etl import TARGET
from runyard_research.upstream import ETL, upstreams


class TrainInput(TaskInput):
    model: Literal["ridge", "random_forest"] = Field(
        "ridge", description="Model family: 'ridge' regression or a 'random_forest'"
    )
    alpha: float = Field(1.0, ge=1e-6, le=1e4, description="Ridge: regularisation strength")
    n_estimators: int = Field(60, ge=1, le=500, description="Random forest: number of trees")
    max_depth: int = Field(6, ge=1, le=32, description="Random forest: depth of each tree")
    cv_folds: int = Field(5, ge=2, le=10, description="Cross-validation folds on train data")
    seed: int = Field(7, ge=0, le=2**31 - 1, description="Seed of the model and of the folds")


class TrainOutput(TaskOutput):
    model: str = Field(description="Model family")
    params: dict[str, float | int] = Field(description="Hyper-parameters the model was fit with")
    cv_r2: float = Field(description="Mean cross-validated R^2 on the train data")
    train_r2: float = Field(description="R^2 of the final fit on the train data")


class Train(Task):
    """Fit a regression model with the chosen hyper-parameters on the train set of one
    upstream research_etl task (given in source_tasks); record the pickled model and its
    cross-validated metrics."""

    name = "research_train"
    task_type = TaskType.TRAIN
    Input = TrainInput
    Output = TrainOutput
    steps = ("read", "cross-validate", "fit", "write")

    def run(self, inputs: TrainInput, run: TaskRun) -> TrainOutput:
        import pandas as pd

        with run.step("read"):
            (etl,) = upstreams(run, inputs.source_tasks, ETL)
            frame = pd.read_parquet(io.BytesIO(etl.read("train")))
            x, y = frame.drop(columns=[TARGET]), frame[TARGET]
            run.log(f"Read {len(frame)} train rows from {etl.task_id}")
        estimator, params = build_model(inputs)
        run.log_params({"model": inputs.model, **params, "rows": len(frame),
                        "features": x.shape[1], "dataset_task": etl.task_id})  # fmt: skip
        with run.step("cross-validate"):
            cv_r2 = cross_validate(estimator, x, y, inputs, run)
            run.log_metric("cv_r2_mean", cv_r2)
        with run.step("fit"):
            estimator.fit(x, y)
            train_r2 = float(estimator.score(x, y))
            run.log_metric("train_r2", train_r2)
            run.log(f"{inputs.model} {params}: cv R2={cv_r2:.3f} train R2={train_r2:.3f}")
        with run.step("write"):
            (run.task_dir / "model.pkl").write_bytes(pickle.dumps(estimator))
            metrics = {
                "model": inputs.model,
                "params": params,
                "cv_r2": cv_r2,
                "train_r2": train_r2,
                "rows": len(frame),
                "features": list(x.columns),
                "dataset_task": etl.task_id,
            }
            (run.task_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
            run.record_artifact("model", "model.pkl")
            run.record_artifact("metrics", "metrics.json")
        return TrainOutput(model=inputs.model, params=params, cv_r2=cv_r2, train_r2=train_r2)


def build_model(inputs: TrainInput):  # type: ignore[no-untyped-def]
    """The unfitted estimator and the hyper-parameters that matter for it."""
    if inputs.model == "random_forest":
        from sklearn.ensemble import RandomForestRegressor

        params: dict[str, float | int] = {
            "n_estimators": inputs.n_estimators,
            "max_depth": inputs.max_depth,
        }
        return RandomForestRegressor(random_state=inputs.seed, n_jobs=1, **params), params
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), Ridge(alpha=inputs.alpha)), {"alpha": inputs.alpha}


def cross_validate(estimator, x, y, inputs: TrainInput, run: TaskRun) -> float:  # type: ignore[no-untyped-def]
    """Mean R^2 over ``cv_folds`` seeded folds, one progress tick and one ``cv_r2`` point
    (step = the fold's number, from 1) per fold."""
    import numpy as np
    from sklearn.base import clone

    order = np.random.default_rng(inputs.seed).permutation(len(x))
    folds = np.array_split(order, inputs.cv_folds)
    scores = []
    for index, held_out in enumerate(folds, start=1):
        kept = np.setdiff1d(order, held_out)
        model = clone(estimator).fit(x.iloc[kept], y.iloc[kept])
        scores.append(float(model.score(x.iloc[held_out], y.iloc[held_out])))
        run.log_metric("cv_r2", scores[-1], step=index)
        run.progress("cross-validate", 100 * index / inputs.cv_folds)
    return sum(scores) / len(scores)
