"""The streamed unpaged list over the index's packed bytes: a blob that does not unpack is
answered from the task's file, and one whose file is gone is left out, in valid JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.api.fulllists import BATCH, _statuses_body
from runyard.api.services import Services
from runyard.config import Settings
from runyard.repository.records import RAW

IDS = [f"etl#load#n{i:04d}" for i in range(BATCH + 5)]  # two chunks


def status(task_id: str, second: int) -> dict[str, object]:
    return {
        "task_id": task_id, "run_id": "r1", "task_type": "etl", "task_name": "load",
        "state": "succeeded", "config": {"task_name": task_id[-5:]},
        "created_at": f"2026-03-01T10:{second // 60 % 60:02d}:{second % 60:02d}.000000Z",
        "error": f"é {second}", "result": {"n": second},
    }  # fmt: skip


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    settings = Settings.load(
        cli={"workspace_dir": str(tmp_path / "ws"), "log_dir": str(tmp_path / "logs")}
    )
    built = Services.build(settings)
    for second, task_id in enumerate(IDS):
        folder = built.workspace.task_dir(task_id)
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps(status(task_id, second)))
    built.repository.start(watch=False)
    yield built
    built.repository.stop()


def streamed(services: Services, summary: bool = False) -> list[dict[str, object]]:
    body = b"".join(_statuses_body(services, services.repository.list_entries(), summary))
    answer = json.loads(body)
    assert answer["success"] is True
    return answer["answer"]  # type: ignore[no-any-return]


def damage(services: Services, task_id: str) -> None:
    """What a damaged blob would look like in memory (nothing in runyard writes one)."""
    index = services.repository._index
    record = index.statuses[task_id]
    index.statuses[task_id] = (*record[:RAW], record[RAW][:-2], *record[RAW + 1 :])  # type: ignore[assignment]


def test_a_damaged_blob_is_streamed_from_the_file(services: Services) -> None:
    expected = streamed(services)
    assert [item["task_id"] for item in expected] == IDS[::-1]
    assert expected[0] == status(IDS[-1], len(IDS) - 1) | {
        "started_at": None, "finished_at": None, "pid": None, "exit_code": 0, "steps": [],
        "log_path": "",
    }  # fmt: skip
    summary = streamed(services, summary=True)
    damage(services, IDS[0])
    damage(services, IDS[-1])  # the first item of the first chunk
    damage(services, IDS[4])  # in the second chunk
    assert streamed(services) == expected
    damage(services, IDS[7])
    assert streamed(services, summary=True) == summary


def test_a_damaged_blob_whose_file_is_gone_is_left_out(services: Services) -> None:
    expected = streamed(services)
    gone = {IDS[-1], *IDS[:5]}  # the first item, and the whole second chunk
    for task_id in gone:
        damage(services, task_id)
        services.workspace.status_path(task_id).unlink()
    assert streamed(services) == [item for item in expected if item["task_id"] not in gone]
