"""A submit crosses to the thread pool once: with an ``Idempotency-Key`` its reservation,
the task's creation and the key's answer are one hop there, not three, and answer as
before (a replay, a conflict, a refused task kept as the key's answer)."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from starlette.testclient import TestClient

from runyard.api.app import create_app
from runyard.api.idempotent import find_keyed_task
from runyard.api.services import Services
from runyard.config import Settings
from runyard.runtime.creation import IDEMPOTENCY_FILE, KEY_MARK_PREFIX, KEY_XATTR, key_mark

TOKEN = "t" * 32
DEMO = {"arguments": {"task": "demo", "x": 1, "y": 2}}


@pytest.fixture()
def services(tmp_path: Path) -> Iterator[Services]:
    settings = Settings(
        workspace_dir=tmp_path / "ws",
        log_dir=tmp_path / "logs",
        token=TOKEN,
        max_concurrent_tasks=1,
    )
    built = Services.build(settings)
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture()
def client(services: Services) -> Iterator[TestClient]:
    app = create_app(services.settings, services)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        http.headers["authorization"] = f"Bearer {TOKEN}"
        yield http


@pytest.fixture()
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions sent to the thread pool (each still runs there)."""
    sent: list[str] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(func, "__name__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return sent


def _submit(http: TestClient, hops: list[str], body: dict, key: str | None) -> tuple[Any, int]:
    hops.clear()  # each entry: what went to the thread pool
    headers = {"Idempotency-Key": key} if key else {}
    reply = http.post("/jobs/submit", json=body, headers=headers)
    return reply, len(hops)


def test_a_keyed_submit_is_one_hop_and_its_retry_answers_it_again(
    client: TestClient, hops: list[str], tmp_path: Path
) -> None:
    _submit(client, hops, {"arguments": {"task": "no-such-task"}}, "opens-the-key-store")
    first, count = _submit(client, hops, DEMO, "one-hop")
    assert first.status_code == 200 and first.json()["success"] is True, first.text
    assert count == 1, hops
    task_id = first.json()["answer"]["task_id"]
    folder = tmp_path / "ws" / "base" / task_id
    # the key's mark is an attribute of the folder: no file (no inode) of its own
    digest = hashlib.sha256(b"jobs/submit:admin\none-hop").digest()
    assert os.getxattr(folder, KEY_XATTR) == digest
    assert not [name for name in os.listdir(folder) if name.startswith(KEY_MARK_PREFIX)]

    again, count = _submit(client, hops, DEMO, "one-hop")
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert count == 1, hops
    other = dict(DEMO, arguments={"task": "demo", "x": 9, "y": 2})
    conflict, _ = _submit(client, hops, other, "one-hop")
    assert conflict.status_code == 409 and conflict.json()["success"] is False
    listed = client.post("/jobs/list_task_ids", json={"arguments": {}}).json()["answer"]
    assert listed == [task_id]


def test_a_refused_task_is_kept_as_the_keys_answer_and_a_keyless_submit_is_one_hop(
    client: TestClient, hops: list[str]
) -> None:
    unknown = {"arguments": {"task": "no-such-task"}}
    refused, count = _submit(client, hops, unknown, "refused")
    assert refused.status_code == 200 and refused.json()["success"] is False
    assert "Unknown Task" in refused.json()["answer"]
    assert count <= 2, hops  # the key store opens in a hop of its own, once
    again, count = _submit(client, hops, unknown, "refused")
    assert again.json() == refused.json() and again.headers["idempotent-replayed"] == "true"
    assert count == 1, hops

    plain, count = _submit(client, hops, DEMO, None)
    assert plain.json()["success"] is True and count == 1, hops


def test_a_crashed_submit_is_found_by_its_keys_mark_or_an_older_versions_key_file(
    client: TestClient, services: Services
) -> None:
    """What a retry looks for when the key was reserved but its answer lost: the folder
    holding the key's mark, or (made by an earlier version) the key in its key file. A
    folder of another key, or none, is not it."""
    made = client.post("/jobs/submit", json=DEMO, headers={"Idempotency-Key": "marked"})
    task_id = made.json()["answer"]["task_id"]
    marked = "jobs/submit:admin\nmarked"
    found = find_keyed_task(services, marked)
    assert found is not None and found["task_id"] == task_id
    assert find_keyed_task(services, "jobs/submit:admin\nanother") is None
    folder = services.workspace.task_dir(task_id)
    os.removexattr(folder, KEY_XATTR)
    assert find_keyed_task(services, marked) is None
    (folder / key_mark(marked)).touch()  # as the versions before marked it
    found = find_keyed_task(services, marked)
    assert found is not None and found["task_id"] == task_id
    assert find_keyed_task(services, "jobs/submit:admin\nanother") is None
    (folder / key_mark(marked)).unlink()
    (folder / IDEMPOTENCY_FILE).write_text(marked)  # as earlier versions kept it
    found = find_keyed_task(services, marked)
    assert found is not None and found["task_id"] == task_id
    assert find_keyed_task(services, "jobs/submit:admin\nanother") is None


def test_a_folder_that_takes_no_attribute_is_marked_by_an_empty_file(
    client: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the file system keeps no extended attributes, the mark is an empty file named
    by the key's hash, and a retry finds the task by it."""

    def unsupported(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOTSUP, "Operation not supported")

    monkeypatch.setattr(os, "setxattr", unsupported)
    made = client.post("/jobs/submit", json=DEMO, headers={"Idempotency-Key": "no-xattr"})
    assert made.status_code == 200 and made.json()["success"] is True, made.text
    task_id = made.json()["answer"]["task_id"]
    marked = "jobs/submit:admin\nno-xattr"
    folder = services.workspace.task_dir(task_id)
    assert (folder / key_mark(marked)).read_bytes() == b""
    with pytest.raises(OSError):
        os.getxattr(folder, KEY_XATTR)
    found = find_keyed_task(services, marked)
    assert found is not None and found["task_id"] == task_id
