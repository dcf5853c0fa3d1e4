"""Tolerant reads of status.json / metadata.json and the record shapes of DESIGN section 2."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from runyard.workspace import TaskMetadata, TaskState, TaskStatus, Workspace, utcnow
from runyard.workspace.atomic import read_bytes_tolerant, read_json_tolerant, write_json_atomic
from runyard.workspace.records import metadata_from_dict, status_from_dict

TASK_ID = "base#demo#api-demo"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    workspace.ensure()
    workspace.task_dir(TASK_ID).mkdir()
    return workspace


def status_json(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "task_id": TASK_ID,
        "run_id": "f5caee3a7b3c40849d0fb3bdc0f0cd23",
        "task_type": "base",
        "task_name": "demo",
        "state": "queued",
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
    base.update(changes)
    return base


def metadata_json(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "task_id": TASK_ID,
        "reg_name": "demo",
        "created_at": "2026-10-02T00:00:00Z",
        "task_type": "base",
        "input_params": {"x": 1, "y": 2},
        "output_params": {"value": 3},
    }
    base.update(changes)
    return base


def test_the_status_wire_shape_round_trips(ws: Workspace) -> None:
    status = TaskStatus.model_validate(status_json())
    ws.write_status(status, durable=True)
    assert json.loads(ws.status_path(TASK_ID).read_text()) == status_json()
    assert ws.read_status(TASK_ID) == status
    assert status.state is TaskState.QUEUED and not status.terminal


def test_steps_have_name_times_and_percentage(ws: Workspace) -> None:
    step = {"name": "compute", "started_at": "2026-10-02T00:00:01Z", "finished_at": None}
    write_json_atomic(ws.status_path(TASK_ID), status_json(state="running", steps=[step]))
    status = ws.read_status(TASK_ID)
    assert status is not None
    assert status.to_json()["steps"] == [{**step, "percentage": 0.0}]


def test_old_status_json_loads_with_defaults() -> None:
    minimal = {k: status_json()[k] for k in ("task_id", "run_id", "task_type", "task_name")}
    status = status_from_dict({**minimal, "state": "failed", "created_at": "x"}, TASK_ID)
    assert status is not None and status.terminal
    assert (status.exit_code, status.error, status.steps, status.log_path) == (0, "", [], "")


def test_the_metadata_wire_shape_has_no_run_id(ws: Workspace) -> None:
    meta = TaskMetadata.model_validate(metadata_json())
    ws.write_metadata(meta)
    on_disk = json.loads(ws.metadata_path(TASK_ID).read_text())
    assert on_disk == metadata_json()
    assert "run_id" not in on_disk
    assert ws.read_metadata(TASK_ID) == meta


def test_terminal_states() -> None:
    assert {s.value for s in TaskState if s.terminal} == {"succeeded", "failed", "cancelled"}


def test_utcnow_is_iso_utc_with_z() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", utcnow())


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{not json",
        json.dumps(status_json()).encode()[:-7],
        b"[1, 2]",
        b'"a string"',
        b"42",
        b"null",
        b"\xff\xfe\x00{",
    ],
    ids=["empty", "invalid", "truncated", "list", "string", "number", "null", "not-utf8"],
)
def test_unusable_json_reads_as_missing(ws: Workspace, raw: bytes) -> None:
    ws.status_path(TASK_ID).write_bytes(raw)
    ws.metadata_path(TASK_ID).write_bytes(raw)
    assert ws.read_status(TASK_ID) is None
    assert ws.read_metadata(TASK_ID) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"task_id": "base#demo#other"},
        {"task_type": "etl"},
        {"state": "exploded"},
        {"steps": 5},
        {"exit_code": "zero"},
        {"run_id": None},
    ],
)
def test_a_status_that_does_not_fit_reads_as_missing(ws: Workspace, changes: dict) -> None:
    write_json_atomic(ws.status_path(TASK_ID), status_json(**changes))
    assert ws.read_status(TASK_ID) is None


@pytest.mark.parametrize(
    "changes",
    [{"task_id": "base#demo#other"}, {"task_type": "etl"}, {"input_params": []}, {"reg_name": 1}],
)
def test_metadata_that_does_not_fit_reads_as_missing(ws: Workspace, changes: dict) -> None:
    write_json_atomic(ws.metadata_path(TASK_ID), metadata_json(**changes))
    assert ws.read_metadata(TASK_ID) is None


def test_identity_is_checked_against_the_folder(ws: Workspace) -> None:
    assert status_from_dict(status_json(), "base#demo#elsewhere") is None
    assert metadata_from_dict(metadata_json(), "base#demo#elsewhere") is None
    assert status_from_dict(None, TASK_ID) is None
    assert status_from_dict(status_json(), TASK_ID) is not None


def test_symlinked_records_read_as_missing(ws: Workspace, tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    write_json_atomic(real, status_json())
    os.symlink(real, ws.status_path(TASK_ID))
    write_json_atomic(tmp_path / "meta.json", metadata_json())
    os.symlink(tmp_path / "meta.json", ws.metadata_path(TASK_ID))
    assert read_json_tolerant(real) is not None
    assert ws.read_status(TASK_ID) is None
    assert ws.read_metadata(TASK_ID) is None


def test_folders_fifos_and_missing_files_read_as_missing(ws: Workspace) -> None:
    ws.status_path(TASK_ID).mkdir()
    os.mkfifo(ws.metadata_path(TASK_ID))
    assert ws.read_status(TASK_ID) is None
    assert ws.read_metadata(TASK_ID) is None
    assert read_bytes_tolerant(ws.root / "nothing-here") is None


def test_extra_fields_are_kept(ws: Workspace) -> None:
    write_json_atomic(ws.status_path(TASK_ID), status_json(custom={"k": 1}))
    status = ws.read_status(TASK_ID)
    assert status is not None and status.to_json()["custom"] == {"k": 1}
