"""``runyard example research --dataset wine`` with no server: the example's pipeline
(``runyard_research.pipeline``) runs as one pipeline run on a supervisor in the CLI's own
process, its ``dataset`` parameter taken from ``--dataset``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runyard.workspace.layout import Workspace


def runyard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args, "--workspace-dir", "ws", "--log-dir", "logs"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_the_example_runs_its_pipeline_from_the_files_with_the_dataset_param(
    tmp_path: Path,
) -> None:
    made = runyard("run", "demo", "x=1", "y=2", cwd=tmp_path)  # makes the workspace
    assert made.returncode == 0, made.stderr
    done = runyard("example", "research", "--dataset", "wine", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["served"] is False
    assert {kind: len(ids) for kind, ids in answer["tasks"].items()} == {
        "etl": 1, "train": 2, "backtest": 2, "analysis": 1,
    }  # fmt: skip
    workspace = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    (etl,) = answer["tasks"]["etl"]
    assert workspace.read_status(etl).config["dataset"] == "wine"
    record = json.loads((tmp_path / "ws" / ".pipelines" / f"{answer['pipeline_run']}.json")
                        .read_text())  # fmt: skip
    assert record["pipeline"] == "research" and record["params"] == {"dataset": "wine"}
    for ids in answer["tasks"].values():
        for task_id in ids:
            assert workspace.read_status(task_id).state == "succeeded"
    report = workspace.read_status(answer["final_task"])
    assert set(report.config["source_tasks"].split(",")) == set(answer["tasks"]["backtest"])
