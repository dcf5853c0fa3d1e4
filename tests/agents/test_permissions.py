"""Run folders belong to the configured run UID/GID, are group-writable and setgid, and the
run executes as that user; nothing is ever world-writable."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_helpers import add_artifact, probes, start, wait_done
from agent_support import MODES, agent_settings

from runyard.api.agentservice import AgentService
from runyard.wire import TaskState

RUN_UID = RUN_GID = 1000
SYSTEM_PYTHON = "/usr/bin/python3"
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root"),
    pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs /usr/bin/python3"),
]


@pytest.fixture
def root() -> Iterator[Path]:
    # the run user must be able to traverse to its folders; pytest's tmp_path is 0700 root
    folder = Path(tempfile.mkdtemp(prefix="runyard-perm-", dir="/tmp"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def owner_mode(path: Path) -> tuple[int, int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


@pytest.mark.parametrize("mode", MODES)
def test_runs_execute_as_the_run_user_in_its_group(root: Path, mode: str) -> None:
    settings = agent_settings(
        root, mode, agent_run_uid=RUN_UID, agent_run_gid=RUN_GID, agent_python=SYSTEM_PYTHON
    )
    service = AgentService.open(settings)
    service.start()
    try:
        session = service.catalog.create_session()
        add_artifact(service, session.id, b"data\n", rel="data/x.csv")
        run = wait_done(service, start(service, session.id, "checkpoint\nanswer mine").id)
        assert run.state == TaskState.SUCCEEDED, run
        found = probes(service, run.id)
        assert (found["uid"], found["gid"]) == (RUN_UID, RUN_GID)
        _check_folders(service, run.id, session.id)
    finally:
        service.stop()


def _check_folders(service: AgentService, run_id: str, session_id: str) -> None:
    # the workspace is the server's alone; the run's group may only pass through it
    layout = service.layout
    for folder in (layout.root.parent, layout.root, layout.workspaces, layout.session_states):
        assert owner_mode(folder) == (os.getuid(), RUN_GID, 0o710), folder
    run_dir = service.layout.run_dir(run_id)
    assert owner_mode(run_dir) == (os.getuid(), RUN_GID, 0o2750)
    for name in ("in", "out", "tmp"):
        assert owner_mode(run_dir / name) == (RUN_UID, RUN_GID, 0o2770)
    assert owner_mode(run_dir / "in" / "data") == (RUN_UID, RUN_GID, 0o2770)
    state = service.layout.state_dir(session_id)
    for folder in (state, *(state / n for n in ("checkpoints", "checkpoint-db", "tool-cache"))):
        assert owner_mode(folder) == (RUN_UID, RUN_GID, 0o2770)
    uid, gid, mode = owner_mode(run_dir / "out" / "final-answer.md")
    assert (uid, gid) == (RUN_UID, RUN_GID) and mode & 0o060 == 0o060 and not mode & 0o007
    assert owner_mode(state / "checkpoints" / "probe.json")[:2] == (RUN_UID, RUN_GID)
    for folder, dirs, files in os.walk(service.layout.root):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink() and not stat.S_ISSOCK(path.lstat().st_mode):
                assert not path.lstat().st_mode & 0o002, f"{path} is world-writable"
