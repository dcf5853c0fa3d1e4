"""AxonX 0.2.2's sync jobs between two real runyard servers, called by the real AxonX CLI.

Server A runs tasks; their archive (:func:`runyard.sync.archive.build_archive`) is staged in
server B's workspace and applied by ``axonx sync_tasks``; ``axonx task_sync_index`` on B
lists them afterwards with A's run ids. Answers validate against AxonX's own models
(``DisplayReplica`` for each index entry, ``SyncTasksReport``). Attacks: archives with a
link, ``..``, a task under the wrong type folder, a forged artifact; an archive path out
of the workspace or through a link; deleting a task made on B or an unknown folder; a
run token. Nothing of a refused archive is applied.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axonx_models import validates
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from runyard.sync.archive import build_archive
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    from agent_support import PACKAGES

    tmp = tmp_path_factory.mktemp("axonx-sync")
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "none"}  # for a run token
    a = start_server(tmp / "a")
    try:
        b = start_server(tmp / "b", config=config)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.fixture(scope="module")
def axonx(
    pair: tuple[ServerProcess, ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), pair[1], tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


def run_demo(server: ServerProcess, name: str, x: int) -> dict[str, Any]:
    handle = server.call("submit", task="demo", task_name=name, x=x, y=1)["answer"]
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["answer"]["state"] == "succeeded", final
    return final["answer"]  # type: ignore[no-any-return]


def stage(source: ServerProcess, target: ServerProcess, task_ids: list[str]) -> str:
    """The archive of ``task_ids`` on ``source``, written into ``target``'s workspace."""
    name = f"sync-{uuid.uuid4().hex[:8]}.tar.gz"
    workspace = Workspace.open(source.workspace, source.root / "logs")
    build_archive(workspace, task_ids, target.workspace / name)
    return name


def job(server: ServerProcess, name: str, headers: dict[str, str] | None = None, **args: Any):
    with httpx.Client(base_url=server.url, headers=headers or server.headers, timeout=60) as c:
        return c.post(f"/jobs/{name}", json={"arguments": args})


def folder(task_id: str) -> str:
    return f"{task_id.split('#', 1)[0]}/{task_id}"


def test_tasks_synced_by_the_axonx_cli_are_held_and_indexed(
    pair: tuple[ServerProcess, ServerProcess], axonx: AxonX
) -> None:
    a, b = pair
    tag = uuid.uuid4().hex[:6]
    first, second = run_demo(a, f"one-{tag}", 2), run_demo(a, f"two-{tag}", 5)
    empty = axonx.ok("task_sync_index", "--task_names", json.dumps([f"one-{tag}"]))["answer"]
    assert empty["tasks"] == {} and empty["transfer_budget_bytes"] == 10240 << 20

    path = stage(a, b, [first["task_id"], second["task_id"]])
    applied = axonx.ok("sync_tasks", "--path", path)["answer"]
    validates("axonx.task.sync.models.SyncTasksReport", applied)
    assert applied["archive"] == path and applied["deleted"] == []
    assert applied["applied"] == [folder(first["task_id"]), folder(second["task_id"])]
    assert applied["files"] > 4

    held = b.call("status", task_id=second["task_id"])["answer"]
    assert held["state"] == "succeeded" and held["result"]["result"] == 6
    assert held["run_id"] == second["run_id"]
    log = b.call("read_task_log", task_id=second["task_id"])["answer"]
    assert log["content"], log

    index = axonx.ok("task_sync_index", "--task_names", json.dumps([f"one-{tag}"]))["answer"]
    assert list(index["tasks"]) == [first["task_id"]]
    entry = index["tasks"][first["task_id"]]
    assert entry["run_id"] == first["run_id"] and "status.json" in entry["files"]
    replica = {k: v for k, v in entry.items() if k != "run_id"}
    validates("axonx.task.schemas.replica.DisplayReplica", replica)
    everything = axonx.ok("task_sync_index")["answer"]["tasks"]
    assert {first["task_id"], second["task_id"]} <= set(everything)

    gone = axonx.ok("sync_tasks", "--deletions", json.dumps([folder(first["task_id"])]))
    assert gone["answer"]["deleted"] == [folder(first["task_id"])]
    assert not (b.workspace / folder(first["task_id"])).exists()
    assert first["task_id"] not in axonx.ok("task_sync_index")["answer"]["tasks"]


def test_a_task_made_here_is_neither_indexed_nor_deleted(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    _, b = pair
    own = run_demo(b, f"own-{uuid.uuid4().hex[:6]}", 1)
    assert own["task_id"] not in job(b, "task_sync_index").json()["answer"]["tasks"]
    for deletions in ([folder(own["task_id"])], ["base/../../etc"], [own["task_id"]]):
        answer = job(b, "sync_tasks", deletions=deletions).json()
        assert answer["success"] is False, answer
    assert b.call("status", task_id=own["task_id"])["answer"]["state"] == "succeeded"


def forged(tmp: Path, members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """A gzipped tar of ``(name, body, link target)`` members."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, body, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(body or b"")
                tar.addfile(info, io.BytesIO(body or b""))
    return out.getvalue()


def test_a_forged_archive_applies_nothing(pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    task = run_demo(a, f"forge-{uuid.uuid4().hex[:6]}", 3)
    good = stage(a, b, [task["task_id"]])
    with tarfile.open(b.workspace / good) as tar:
        real = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    base = folder(task["task_id"])
    status = real[f"{base}/task/status.json"]
    metadata = real[f"{base}/task/metadata.json"]
    attacks = {
        "link": [(f"{base}/task/status.json", None, "/etc/passwd")],
        "dotdot": [(f"{base}/task/../../../../escape.txt", b"x", None)],
        "type": [(f"pipeline/{task['task_id']}/task/status.json", status, None)],
        "short": [("base/status.json", status, None)],
        "foreign": [  # another task's records under this task's folder
            (f"{base}-other/task/status.json", status, None),
            (f"{base}-other/task/metadata.json", metadata, None),
        ],
    }
    for why, members in attacks.items():
        name = f"{why}.tar.gz"
        (b.workspace / name).write_bytes(forged(b.workspace, members))
        answer = job(b, "sync_tasks", path=name).json()
        assert answer["success"] is False, (why, answer)
        assert not (b.workspace / base).exists(), why
        assert not (b.workspace / f"{base}-other").exists(), why
    assert not (b.workspace.parent / "escape.txt").exists()
    assert job(b, "status", task_id=task["task_id"]).json()["success"] is False


def test_the_archive_path_stays_in_the_workspace(
    pair: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    a, b = pair
    task = run_demo(a, f"path-{uuid.uuid4().hex[:6]}", 4)
    name = stage(a, b, [task["task_id"]])
    outside = tmp_path / name
    outside.write_bytes((b.workspace / name).read_bytes())
    (b.workspace / f"link-{name}").symlink_to(outside)
    for path in (f"../{name}", str(outside), f"link-{name}"):
        answer = job(b, "sync_tasks", path=path).json()
        assert answer["success"] is False and "nsafe path" in answer["answer"], (path, answer)
    assert not (b.workspace / folder(task["task_id"])).exists()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("task_sync_index", {"task_names": ["bad name"]}),
        ("task_sync_index", {"task_names": ["x" * 33]}),
        ("task_sync_index", {"task_names": "one"}),
        ("task_sync_index", {"live_task_ids": [""]}),
        ("task_sync_index", {"since": "2020"}),
        ("sync_tasks", {"path": ""}),
        ("sync_tasks", {"deletions": ["base/x"] * 201}),
        ("sync_tasks", {"deletions": [""]}),
        ("sync_tasks", {"path": "a.tar.gz", "force": True}),
    ],
)
def test_bad_arguments_are_422(
    pair: tuple[ServerProcess, ServerProcess], name: str, args: dict[str, Any]
) -> None:
    reply = job(pair[1], name, **args)
    assert reply.status_code == 422, reply.text


def test_a_run_token_is_refused_both_sync_jobs(pair: tuple[ServerProcess, ServerProcess]) -> None:
    from api_helpers import api, create_run, new_session, wait_file, wait_run

    a, b = pair
    task = run_demo(a, f"token-{uuid.uuid4().hex[:6]}", 6)
    path = stage(a, b, [task["task_id"]])
    with api(b) as admin:
        session_id = new_session(admin)
        run = create_run(admin, session_id, "token\nwait-for go\nanswer done", package="probe")
        as_run = {"authorization": f"Bearer {wait_file(admin, run['id'], 'token').decode()}"}
        try:
            for name, args in (("task_sync_index", {}), ("sync_tasks", {"path": path})):
                reply = job(b, name, as_run, **args)
                assert reply.status_code == 403, (name, reply.text)
            assert not (b.workspace / folder(task["task_id"])).exists()
        finally:
            (b.workspace / "agent" / "session-state" / session_id / "go").touch()
            assert wait_run(admin, run["id"])["state"] == "succeeded"


def test_a_task_expanding_past_max_task_mb_is_refused_before_it_is_unpacked(
    pair: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    """8 MiB of zeros gzip to a few KiB: the archive is small, its task is not."""
    a, _ = pair
    task = run_demo(a, f"bomb-{uuid.uuid4().hex[:6]}", 7)
    small = start_server(tmp_path / "small", config={"sync": {"max_task_mb": 1}})
    try:
        base = folder(task["task_id"])
        bomb = forged(tmp_path, [(f"{base}/task/zeros.bin", bytes(8 << 20), None)])
        assert len(bomb) < 64 << 10
        (small.workspace / "bomb.tar.gz").write_bytes(bomb)
        answer = job(small, "sync_tasks", path="bomb.tar.gz").json()
        assert answer["success"] is False, answer
        assert "larger than sync.max_task_mb; not applied" in answer["answer"], answer
        assert not (small.workspace / base).exists()
        assert [p.name for p in small.workspace.glob(".sync-*")] == []
    finally:
        small.stop()
