"""A workspace written the way the seed documents it (the AxonX layout) is read as-is."""

from __future__ import annotations

import json
from pathlib import Path

from serverproc import start_server

SEED_STATUS = {
    "task_id": "base#demo#api-demo",
    "run_id": "f5caee3a7b3c40849d0fb3bdc0f0cd23",
    "task_type": "base",
    "task_name": "demo",
    "state": "succeeded",
    "config": {"task_name": "api-demo", "source_tasks": "", "x": 1, "y": 2, "fail": False},
    "created_at": "2026-10-02T00:00:00Z",
    "started_at": None,
    "finished_at": None,
    "pid": None,
    "exit_code": 0,
    "error": "",
    "result": {},
    "steps": [],
    "log_path": "",
}


def write_seed_workspace(root: Path) -> None:
    demo = root / "base" / "base#demo#api-demo"
    demo.mkdir(parents=True)
    (demo / "status.json").write_text(json.dumps(SEED_STATUS, indent=2))
    (demo / "events.jsonl").write_text(
        '{"kind": "progress", "name": "compute", "started_at": "2026-10-02T00:00:00Z", '
        '"finished_at": null, "percentage": 50}\n'
    )
    etl = root / "etl" / "etl#my-etl#dataset-01"
    (etl / "data").mkdir(parents=True)
    (etl / "data" / "dataset.parquet").write_bytes(b"PAR1")
    metadata = {
        "task_id": "etl#my-etl#dataset-01",
        "reg_name": "my-etl",
        "created_at": "2026-10-01T00:00:00Z",
        "task_type": "etl",
        "input_params": {"task_name": "dataset-01", "source_tasks": ""},
        "output_params": {"artifacts": {"dataset": {"path": "data/dataset.parquet", "size": 4, "sha256": "x"}}},
    }
    (etl / "metadata.json").write_text(json.dumps(metadata))
    child = root / "train" / "train#fit#model-01"
    child.mkdir(parents=True)
    (child / "status.json").write_text(json.dumps({
        **SEED_STATUS, "task_id": "train#fit#model-01", "task_type": "train", "task_name": "fit",
        "state": "failed", "exit_code": 1, "error": "RuntimeError: diverged",
        "config": {"task_name": "model-01", "source_tasks": "etl#my-etl#dataset-01,etl#my-etl#gone"},
        "created_at": "2026-10-03T00:00:00Z",
    }))  # fmt: skip
    (root / "tushare").mkdir()
    (root / "plugins" / "artifacts").mkdir(parents=True)
    (root / "agent").mkdir()


def test_seed_layout_is_listed_and_queried(tmp_path: Path) -> None:
    workspace = tmp_path / ".axonx"
    write_seed_workspace(workspace)
    srv = start_server(tmp_path / "srv", workspace=workspace)
    try:
        ids = srv.call("list_task_ids")["answer"]
        assert set(ids) == {"base#demo#api-demo", "train#fit#model-01"}  # metadata-only is not listed
        status = srv.call("status", task_id="base#demo#api-demo")["answer"]
        assert status == SEED_STATUS
        listed = [s["task_id"] for s in srv.call("list_task_statuses")["answer"]]
        assert listed == ["train#fit#model-01", "base#demo#api-demo"]
        graph = srv.call("get_task_graph", task_id="train#fit#model-01")["answer"]
        nodes = {n["task_id"]: n for n in graph["nodes"]}
        assert nodes["train#fit#model-01"]["provisional"] is True
        assert nodes["etl#my-etl#dataset-01"]["state"] == "succeeded"
        assert nodes["etl#my-etl#gone"]["missing"] is True
        context = srv.call("get_task_context", task_id="etl#my-etl#dataset-01")["answer"]
        assert context["metadata_exists"] is True and context["status"] is None
        assert context["relations"]["direct_downstream"] == ["train#fit#model-01"]
        meta_only = srv.call("status", task_id="etl#my-etl#dataset-01")
        assert meta_only["success"] is False and meta_only["answer"].startswith("KeyError")
        assert srv.call("delete_tasks", task_ids=["etl#my-etl#dataset-01"])["answer"] == ["etl#my-etl#dataset-01"]
        assert (workspace / "tushare").is_dir() and (workspace / "plugins" / "artifacts").is_dir()
    finally:
        srv.stop()
