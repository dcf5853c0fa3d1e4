"""What the sender puts in a task's tar: the folder's own files and the run's log at the
path the ids give, nothing a record or a link names — also when the folder changes
between the walk and the read."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from runyard.sync.errors import UnsendableTask
from runyard.sync.tarstream import task_tar_stream
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

TASK_ID = "base#demo#stream"
SECRET = b"host secret 77e1"


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    ws.task_dir(TASK_ID).mkdir()
    log = ws.run_log_path(TASK_ID, "r1")
    log.parent.mkdir(parents=True)
    log.write_bytes(b"the run's log\n")
    (tmp_path / "secret").write_bytes(SECRET)
    return ws


def _status(ws: Workspace, **fields: str) -> TaskStatus:
    data = {
        "task_id": TASK_ID, "run_id": "r1", "task_type": "base", "task_name": "demo",
        "state": "succeeded", "created_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:01Z", **fields,
    }  # fmt: skip
    status = TaskStatus.model_validate(data)
    ws.write_status(status)
    return status


def _members(chunks: object) -> dict[str, bytes]:
    stream = io.BytesIO(b"".join(chunks))  # type: ignore[arg-type]
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        return {m.name: tar.extractfile(m).read() if m.isreg() else b"" for m in tar}  # type: ignore[union-attr]


def test_the_log_is_the_one_the_ids_give_never_the_status_log_path(
    workspace: Workspace, tmp_path: Path
) -> None:
    status = _status(workspace, log_path=str(tmp_path / "secret"))
    members = _members(task_tar_stream(workspace, status))
    assert members["log"] == b"the run's log\n"
    workspace.run_log_path(TASK_ID, "r1").unlink()
    members = _members(task_tar_stream(workspace, status))
    assert "log" not in members
    assert SECRET not in b"".join(members.values())


def test_a_log_that_is_a_link_is_not_sent(workspace: Workspace, tmp_path: Path) -> None:
    status = _status(workspace)
    log = workspace.run_log_path(TASK_ID, "r1")
    log.unlink()
    log.symlink_to(tmp_path / "secret")
    assert "log" not in _members(task_tar_stream(workspace, status))
    log.unlink()
    os.link(tmp_path / "secret", log)  # a hard link is a link too
    assert "log" not in _members(task_tar_stream(workspace, status))
    log.unlink()
    log.parent.rmdir()
    log.parent.symlink_to(tmp_path, target_is_directory=True)  # a linked log folder
    (tmp_path / "r1.log").write_bytes(SECRET)
    assert "log" not in _members(task_tar_stream(workspace, status))


def test_a_file_swapped_after_the_walk_is_not_sent(workspace: Workspace, tmp_path: Path) -> None:
    status = _status(workspace)
    folder = workspace.task_dir(TASK_ID)
    (folder / "out.txt").write_bytes(b"listed")
    (folder / "sub").mkdir()
    (folder / "sub" / "inner.txt").write_bytes(b"inner")
    stream = task_tar_stream(workspace, status)  # the folder is walked here
    swapped = folder / "swapped.tmp"
    swapped.write_bytes(SECRET)
    os.replace(swapped, folder / "out.txt")  # another file under the listed name
    os.rename(folder / "sub", folder / "sub.gone")
    (folder / "sub").symlink_to(tmp_path, target_is_directory=True)  # a link for the folder
    (tmp_path / "inner.txt").write_bytes(SECRET)
    members = _members(stream)
    assert "task/out.txt" not in members
    assert "task/sub/inner.txt" not in members
    assert SECRET not in b"".join(members.values())
    assert b"succeeded" in members["task/status.json"]


def test_links_fifos_and_hidden_names_in_the_folder_are_left_out(
    workspace: Workspace, tmp_path: Path
) -> None:
    status = _status(workspace)
    folder = workspace.task_dir(TASK_ID)
    (folder / "leak.txt").symlink_to(tmp_path / "secret")
    (folder / "leakdir").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(folder / "pipe")
    (folder / ".worker.lock").write_bytes(b"")
    (folder / "kept.txt").write_bytes(b"kept")
    members = _members(task_tar_stream(workspace, status))
    assert set(members) == {"task/status.json", "task/kept.txt", "log"}


def test_a_folder_deeper_than_a_receiver_takes_is_not_sent(workspace: Workspace) -> None:
    status = _status(workspace)
    deep = workspace.task_dir(TASK_ID).joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_bytes(b"deep")
    with pytest.raises(UnsendableTask, match="deeper than 32"):
        task_tar_stream(workspace, status)


def test_a_status_with_a_bad_run_id_is_not_sent(workspace: Workspace) -> None:
    status = _status(workspace).model_copy(update={"run_id": "../../../PWNED"})
    with pytest.raises(UnsendableTask, match="run_id"):
        task_tar_stream(workspace, status)
