"""The server never changes a host folder through a symlink a run left in a folder it can
write: the session state folder (between runs, real bwrap sandboxes), inputs placed into
in/, and the emptying of tmp/."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_helpers import wait_done
from agent_support import agent_settings, needs_bwrap

from runyard.agents.errors import AgentConflict
from runyard.agents.layout import RUN_DIR_MODE, AgentLayout, Ownership
from runyard.agents.models import Run
from runyard.agents.placement import place_input
from runyard.agents.runs import RunRequest
from runyard.api.agentservice import AgentService
from runyard.wire import TaskState

VICTIM_ID = 12345  # an owner neither the server nor the run user has
RUN_USER = {"agent_run_uid": 65534, "agent_run_gid": 65534, "agent_python": "/usr/bin/python3"}


@pytest.fixture
def root() -> Iterator[Path]:
    # a run user must be able to traverse to its folders; pytest's tmp_path is 0700 root
    folder = Path(tempfile.mkdtemp(prefix="runyard-state-", dir="/tmp"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def host_folder(root: Path) -> Path:
    victim = root / "host-folder"
    victim.mkdir()
    (victim / "keep.txt").write_text("host data")
    os.chown(victim, VICTIM_ID, VICTIM_ID)
    victim.chmod(0o700)
    return victim


def owner_mode(path: Path) -> tuple[int, int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def run_to_end(service: AgentService, session_id: str, prompt: str) -> Run:
    run = service.runs.create(RunRequest(session_id, prompt, package="flip_probe"))
    return wait_done(service, run.id, timeout=60)


@pytest.mark.sandbox
@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
@pytest.mark.parametrize("run_user", [False, True], ids=["server-user", "run-user-65534"])
def test_a_state_folder_replaced_by_a_symlink_is_not_followed(root: Path, run_user: bool) -> None:
    if run_user and (shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3")):
        pytest.skip("running as another user needs setpriv and /usr/bin/python3")
    victim = host_folder(root)
    before = owner_mode(victim)
    service = AgentService.open(agent_settings(root, "bwrap", **(RUN_USER if run_user else {})))
    service.start()
    try:
        session_id = service.catalog.create_session().id
        state = service.layout.state_dir(session_id)
        first = run_to_end(service, session_id, f"symlink {victim} state/tool-cache\nanswer 1")
        assert first.state == TaskState.SUCCEEDED, first
        assert (state / "tool-cache").is_symlink()
        second = run_to_end(service, session_id, "write state/tool-cache/new.txt ok\nanswer 2")
    finally:
        service.stop()
    assert owner_mode(victim) == before  # neither chmod nor chown reached the host folder
    assert sorted(os.listdir(victim)) == ["keep.txt"]
    assert second.state == TaskState.SUCCEEDED, second
    owner = (65534, 65534) if run_user else (os.getuid(), os.getgid())
    assert owner_mode(state / "tool-cache") == (*owner, RUN_DIR_MODE & 0o7777)
    assert (state / "tool-cache" / "new.txt").read_text() == "ok"


@pytest.mark.sandbox
@needs_bwrap
def test_a_state_folder_replaced_by_a_file_is_made_again(root: Path) -> None:
    service = AgentService.open(agent_settings(root, "bwrap"))
    service.start()
    try:
        session_id = service.catalog.create_session().id
        state = service.layout.state_dir(session_id)
        first = run_to_end(service, session_id, "file state/checkpoints not a folder\nanswer 1")
        assert first.state == TaskState.SUCCEEDED and (state / "checkpoints").is_file(), first
        second = run_to_end(service, session_id, "write state/checkpoints/c.json {}\nanswer 2")
    finally:
        service.stop()
    assert second.state == TaskState.SUCCEEDED, second
    assert (state / "checkpoints" / "c.json").read_text() == "{}"


def test_placing_inputs_never_writes_through_a_symlinked_folder(tmp_path: Path) -> None:
    victim = tmp_path / "host-folder"
    victim.mkdir(mode=0o700)
    source = tmp_path / "upload.csv"
    source.write_text("a,b\n")
    inputs = tmp_path / "run" / "in"
    inputs.mkdir(parents=True)
    (inputs / "data").symlink_to(victim)
    for root in (None, inputs):
        with pytest.raises(AgentConflict):
            place_input(
                source, inputs / "data" / "x.csv", read_only_inside=False, owner=Ownership(),
                root=root,
            )  # fmt: skip
        with pytest.raises(AgentConflict):
            place_input(
                source, inputs / "data" / "deeper" / "x.csv", read_only_inside=True,
                owner=Ownership(), root=root,
            )  # fmt: skip
    assert os.listdir(victim) == [] and stat.S_IMODE(victim.stat().st_mode) == 0o700
    (inputs / "file").write_text("")
    with pytest.raises(AgentConflict):
        place_input(source, inputs / "file" / "x.csv", read_only_inside=False, owner=Ownership())


def test_emptying_tmp_removes_links_not_their_targets(tmp_path: Path) -> None:
    layout = AgentLayout(tmp_path / "agent", tmp_path / "logs")
    layout.ensure()
    run_dir = layout.create_run_dirs("run-1", Ownership())
    victim = tmp_path / "host-folder"
    victim.mkdir()
    (victim / "keep.txt").write_text("host data")
    (run_dir / "tmp" / "link").symlink_to(victim)
    (run_dir / "tmp" / "sub").mkdir()
    (run_dir / "tmp" / "sub" / "inner-link").symlink_to(victim)
    layout.clear_tmp("run-1")
    assert os.listdir(run_dir / "tmp") == [] and os.listdir(victim) == ["keep.txt"]
    shutil.rmtree(run_dir / "tmp")
    (run_dir / "tmp").symlink_to(victim)
    layout.clear_tmp("run-1")  # a tmp/ that is a symlink is left alone
    assert os.listdir(victim) == ["keep.txt"]
