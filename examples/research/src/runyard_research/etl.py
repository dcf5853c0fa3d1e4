"""``research_etl`` (etl): load a dataset bundled with scikit-learn, clean it, split it,
and write ``train.parquet``, ``test.parquet`` and ``schema.json``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Literal

from pydantic import Field

from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.workspace.identity import TaskType

DATASETS = ("diabetes", "wine")
TARGET = "target"
DIABETES_COLUMNS = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")
WINE_COLUMNS = (
    "alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols",
    "flavanoids", "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue",
    "od280_od315_of_diluted_wines", "proline",
)  # fmt: skip


class EtlInput(TaskInput):
    dataset: Literal["diabetes", "wine"] = Field(
        "diabetes",
        description="Dataset bundled with scikit-learn: 'diabetes' (disease progression, "
        "442 rows) or 'wine' (alcohol content from the other measurements, 178 rows)",
    )
    test_fraction: float = Field(0.25, ge=0.05, le=0.5, description="Share held out for tests")
    outlier_z: float = Field(
        4.0, ge=1.5, le=10.0, description="Drop rows with a feature this many std devs away"
    )
    seed: int = Field(7, ge=0, le=2**31 - 1, description="Seed of the split")
    min_rows: int = Field(
        20, ge=4, le=1_000_000, description="Fail when fewer rows are left after cleaning"
    )


class EtlOutput(TaskOutput):
    dataset: str = Field(description="The dataset loaded")
    rows_train: int = Field(description="Rows in train.parquet")
    rows_test: int = Field(description="Rows in test.parquet")
    rows_dropped: int = Field(description="Rows dropped as incomplete or outlying")
    features: list[str] = Field(description="Feature columns, in order")


class Etl(Task):
    """Load a small real dataset that ships with scikit-learn, drop incomplete and
    outlying rows, split it into train and test sets and write them as Parquet."""

    name = "research_etl"
    task_type = TaskType.ETL
    Input = EtlInput
    Output = EtlOutput
    steps = ("load", "clean", "split", "write")

    def run(self, inputs: EtlInput, run: TaskRun) -> EtlOutput:
        with run.step("load"):
            frame = load_dataset(inputs.dataset)
            run.log(f"Loaded {inputs.dataset}: {len(frame)} rows, {frame.shape[1] - 1} features")
        with run.step("clean"):
            cleaned = clean(frame, inputs.outlier_z)
            dropped = len(frame) - len(cleaned)
            if len(cleaned) < inputs.min_rows:
                raise ValueError(
                    f"only {len(cleaned)} rows of {inputs.dataset} are left after cleaning, "
                    f"fewer than min_rows={inputs.min_rows}"
                )
            run.log(f"Dropped {dropped} incomplete or outlying rows (|z| > {inputs.outlier_z})")
        with run.step("split"):
            train, test = split(cleaned, inputs.test_fraction, inputs.seed)
        with run.step("write"):
            train.to_parquet(run.task_dir / "train.parquet", index=False)
            run.progress("write", 40)
            test.to_parquet(run.task_dir / "test.parquet", index=False)
            run.progress("write", 80)
            features = [c for c in cleaned.columns if c != TARGET]
            schema = {
                "dataset": inputs.dataset,
                "target": TARGET,
                "features": features,
                "rows": {"train": len(train), "test": len(test)},
            }
            (run.task_dir / "schema.json").write_text(json.dumps(schema, indent=2))
            for name in ("train", "test"):
                run.record_artifact(name, f"{name}.parquet")
            run.record_artifact("schema", "schema.json")
        return EtlOutput(
            dataset=inputs.dataset,
            rows_train=len(train),
            rows_test=len(test),
            rows_dropped=dropped,
            features=features,
        )


def data_folder() -> Path:
    """scikit-learn's bundled data folder, found without importing scikit-learn (its
    import costs seconds a task need not pay to read two CSV files)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("scikit-learn is not installed: pip install -e examples/research")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"


def load_dataset(name: str):  # type: ignore[no-untyped-def]
    """The dataset as one frame: feature columns then ``target``, read from the files that
    ship inside the scikit-learn package (nothing is downloaded)."""
    import pandas as pd

    folder = data_folder()
    if name == "wine":
        frame = pd.read_csv(
            folder / "wine_data.csv", skiprows=1, header=None, names=[*WINE_COLUMNS, "class"]
        )
        return frame.drop(columns=["class"]).rename(columns={"alcohol": TARGET})[
            [*WINE_COLUMNS[1:], TARGET]
        ]
    features = pd.read_csv(
        folder / "diabetes_data_raw.csv.gz", sep=" ", header=None, names=list(DIABETES_COLUMNS)
    )
    target = pd.read_csv(folder / "diabetes_target.csv.gz", header=None, names=[TARGET])
    return pd.concat([features, target], axis=1)


def clean(frame, outlier_z: float):  # type: ignore[no-untyped-def]
    """Rows with no missing value and no feature beyond ``outlier_z`` standard deviations."""
    frame = frame.dropna()
    features = frame.drop(columns=[TARGET])
    spread = features.std(ddof=0).replace(0, 1)
    z = ((features - features.mean()) / spread).abs()
    return frame[(z <= outlier_z).all(axis=1)].reset_index(drop=True)


def split(frame, test_fraction: float, seed: int):  # type: ignore[no-untyped-def]
    """A seeded random split: ``(train, test)``."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(frame))
    cut = max(1, round(len(frame) * test_fraction))
    test, train = frame.iloc[order[:cut]], frame.iloc[order[cut:]]
    return train.reset_index(drop=True), test.reset_index(drop=True)
