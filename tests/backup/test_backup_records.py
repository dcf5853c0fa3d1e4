"""Crafted records inside an archive: its hashes match (the attacker rewrote the manifest),
but a session id ``../../x``, a run id with ``/``, a status naming ``../../PWNED`` or
another task, a grant of a host folder outside the allowed roots. ``runyard backup verify``
says the archive is not intact and why; ``restore`` restores nothing and fails."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from runyard.agents.models import Access, Artifact, MountGrant, Run, Session, SessionStatus
from runyard.agents.store import SQLiteStore
from runyard.backup import BackupError, create_backup, restore_backup, verify_backup
from runyard.wire import TaskState

NOW = "2026-01-01T00:00:00.000000Z"
SESSION = "ses-0193f2c4a1b2-9f3e1c7a"
RUN = "run-0193f2c4a1b3-0badf00d"
ARTIFACT = "art-0193f2c4a1b4-12345678"
GRANT = "mnt-0193f2c4a1b5-87654321"
TASK = "base#demo#a"
STATUS = f"workspace/base/{TASK}/status.json"
STORE = "workspace/agent/state.db"

Change = Callable[[bytes], bytes]


def status_record(task_id: str = TASK, **changes: object) -> dict[str, object]:
    task_type, task, name = task_id.split("#")
    record = {
        "task_id": task_id, "run_id": "f" * 32, "task_type": task_type, "task_name": task,
        "state": "succeeded", "config": {"task_name": name}, "created_at": NOW,
    }  # fmt: skip
    return {**record, **changes}


def legit_workspace(root: Path) -> tuple[Path, Path, Path]:
    """A workspace with a finished task and an agent session that ran once with an upload
    and a mount grant; answers (workspace, logs, allowed mount root)."""
    ws, logs, allowed = root / "ws", root / "logs", root / "allowed"
    task = ws / "base" / TASK
    task.mkdir(parents=True)
    (task / "status.json").write_text(json.dumps(status_record()))
    (logs / "base" / TASK).mkdir(parents=True)
    (logs / "base" / TASK / f"{'f' * 32}.log").write_text("done\n")
    (allowed / "data").mkdir(parents=True)
    agent = ws / "agent"
    for folder in (agent / "uploads", agent / "workspaces" / RUN / "out",
                   agent / "session-state" / SESSION / "checkpoints"):  # fmt: skip
        folder.mkdir(parents=True)
    stored = f"{ARTIFACT}-prices.csv"
    (agent / "uploads" / stored).write_text("a,b\n")
    (agent / "workspaces" / RUN / "out" / "final-answer.md").write_text("done")
    store = SQLiteStore(agent / "state.db")
    try:
        store.create_session(Session(SESSION, "kept", SessionStatus.OPEN, NOW, NOW))
        store.add_artifact(Artifact(ARTIFACT, SESSION, "prices.csv", "", 4, "ab" * 32,
                                    "text/csv", NOW, stored))  # fmt: skip
        host = str((allowed / "data").resolve())
        store.add_grant(MountGrant(GRANT, SESSION, "data", host, Access.RW, NOW))
        store.add_run(Run(RUN, SESSION, TaskState.SUCCEEDED, "hello", NOW,
                          artifact_ids=[ARTIFACT], mount_grant_ids=[GRANT]), exclusive=True)  # fmt: skip
    finally:
        store.close()
    return ws, logs, allowed


def edit_store(*statements: str) -> Change:
    """An attacker's edit of the store: SQL run on the archived ``state.db``."""

    def change(raw: bytes) -> bytes:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "state.db"
            path.write_bytes(raw)
            conn = sqlite3.connect(path)
            conn.execute("PRAGMA journal_mode=DELETE")
            for statement in statements:
                conn.execute(statement)
            conn.commit()
            conn.close()
            return path.read_bytes()

    return change


def edit_status(**changes: object) -> Change:
    return lambda raw: json.dumps({**json.loads(raw), **changes}).encode()


def tamper(archive: Path, target: Path, changes: dict[str, Change],
           renames: dict[str, str] | None = None) -> Path:  # fmt: skip
    """``archive`` with members changed and the manifest rewritten to match, as a forger
    would: every size and sha256 in it is right."""
    renames = renames or {}
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            members.append((member, data))
    manifest = json.loads(next(data for m, data in members if m.name == "MANIFEST.json"))
    manifest["files"] = []
    with tarfile.open(target, "w") as out:
        for member, data in members:
            if member.name == "MANIFEST.json":
                continue
            for old, new in renames.items():
                member.name = member.name.replace(old, new)
            if member.name in changes:
                data = changes[member.name](data)
            member.size = len(data)
            out.addfile(member, io.BytesIO(data) if member.isfile() else None)
            if member.isfile():
                manifest["files"].append({"path": member.name, "size": len(data),
                                          "sha256": hashlib.sha256(data).hexdigest(),
                                          "mode": member.mode})  # fmt: skip
        raw = json.dumps(manifest).encode()
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(raw)
        out.addfile(info, io.BytesIO(raw))
    return target


def runyard(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env["COLUMNS"] = "2000"  # rich wraps its lines to the terminal's width
    argv = [sys.executable, "-m", "runyard", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=110, env=env, cwd=cwd)


def config_with_roots(root: Path, *roots: Path) -> Path:
    path = root / "restore.yaml"
    path.write_text(yaml.safe_dump({"allowed_mount_roots": [str(r) for r in roots]}))
    return path


@pytest.fixture
def legit(tmp_path: Path) -> tuple[Path, Path]:
    """A legitimate backup and the config (allowed mount roots) to check it with."""
    ws, logs, allowed = legit_workspace(tmp_path / "src")
    archive = tmp_path / "legit.tar"
    create_backup(ws, logs, archive)
    return archive, config_with_roots(tmp_path, allowed)


def sentinel_folder(root: Path) -> Path:
    """A host folder outside every workspace: mode 0700 with one file."""
    folder = root / "sentinel"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    (folder / "keep.txt").write_text("host data")
    return folder


def state_of(folder: Path) -> tuple[int, list[str], str]:
    return (
        stat.S_IMODE(folder.lstat().st_mode),
        sorted(os.listdir(folder)),
        (folder / "keep.txt").read_text(),
    )


def test_a_legit_backup_verifies_and_restores(tmp_path: Path, legit: tuple[Path, Path]) -> None:
    archive, config = legit
    checked = runyard(tmp_path, "backup", "verify", archive, "--config", config)
    assert checked.returncode == 0, checked.stderr
    assert "is intact" in checked.stdout and "records are valid" in checked.stdout
    restored = runyard(tmp_path, "backup", "restore", archive, "--config", config,
                       "--workspace-dir", tmp_path / "r" / "ws", "--log-dir", tmp_path / "r" / "logs")  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    assert (tmp_path / "r" / "ws" / "agent" / "session-state" / SESSION).is_dir()


SESSION_ESCAPE = "../../x"
HOSTILE = {
    "session id ../../x in state.db": (
        {
            STORE: edit_store(
                *(
                    f"UPDATE {table} SET session_id = '{SESSION_ESCAPE}'"
                    for table in ("runs", "artifacts", "mount_grants", "history")
                ),
                f"UPDATE sessions SET id = '{SESSION_ESCAPE}'",
            )
        },  # fmt: skip
        {},
        "Invalid session id '../../x'",
    ),
    "run id with a slash": (
        {STORE: edit_store("UPDATE runs SET id = 'run/../../evil'")},
        {},
        "Invalid run id 'run/../../evil'",
    ),
    "status run_id ../../PWNED": (
        {STATUS: edit_status(run_id="../../PWNED")},
        {},
        "its run_id '../../PWNED' is not one path component",
    ),
    "status of another task": (
        {STATUS: edit_status(task_id="base#demo#other")},
        {},
        "its task_id 'base#demo#other' is not the id of its folder 'base#demo#a'",
    ),
    "run folder not named by an id": (
        {},
        {f"workspaces/{RUN}": "workspaces/run.x"},
        "the folder 'run.x' under agent/workspaces is not an id",
    ),
}


@pytest.mark.parametrize("variant", list(HOSTILE))
def test_hostile_records_are_not_intact_and_restore_nothing(
    tmp_path: Path, legit: tuple[Path, Path], variant: str
) -> None:
    archive, config = legit
    changes, renames, reason = HOSTILE[variant]
    hostile = tamper(archive, tmp_path / "hostile.tar", changes, renames)
    checked = runyard(tmp_path, "backup", "verify", hostile, "--config", config)
    assert checked.returncode != 0
    assert "is not intact" in checked.stderr and reason in checked.stderr, checked.stderr
    target = tmp_path / "r"
    restored = runyard(tmp_path, "backup", "restore", hostile, "--config", config,
                       "--workspace-dir", target / "ws", "--log-dir", target / "logs")  # fmt: skip
    assert restored.returncode != 0
    assert reason in restored.stderr, restored.stderr
    assert not (target / "ws").exists() and not (target / "logs").exists()


def test_a_grant_outside_the_allowed_roots_is_refused(
    tmp_path: Path, legit: tuple[Path, Path]
) -> None:
    archive, config = legit
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    edit = edit_store(f"UPDATE mount_grants SET host_path = '{sentinel}'")
    hostile = tamper(archive, tmp_path / "hostile.tar", {STORE: edit})
    reason = f"active mount grant of host folder '{sentinel}', outside the allowed mount roots"
    with pytest.raises(BackupError, match="is not intact") as verified:
        verify_backup(hostile, allowed_mount_roots=[tmp_path / "allowed"])
    assert reason in str(verified.value)
    target = tmp_path / "r"
    target.mkdir()  # an existing empty folder stays empty
    checked = runyard(tmp_path, "backup", "verify", hostile, "--config", config)
    assert checked.returncode != 0 and reason in checked.stderr, checked.stderr
    restored = runyard(tmp_path, "backup", "restore", hostile, "--config", config,
                       "--workspace-dir", target, "--log-dir", tmp_path / "rl")  # fmt: skip
    assert restored.returncode != 0 and reason in restored.stderr, restored.stderr
    assert os.listdir(target) == [] and not (tmp_path / "rl").exists()
    assert state_of(sentinel) == before


def test_revoked_grants_restore_anywhere_active_ones_need_their_root(
    tmp_path: Path, legit: tuple[Path, Path]
) -> None:
    archive, _ = legit
    # no allowed roots configured: the active grant names a folder the server may not mount
    with pytest.raises(BackupError, match="none are configured"):
        verify_backup(archive)
    revoked = tamper(archive, tmp_path / "revoked.tar",
                     {STORE: edit_store("UPDATE mount_grants SET revoked = 1")})  # fmt: skip
    verify_backup(revoked)
    restore_backup(revoked, tmp_path / "r" / "ws", tmp_path / "r" / "logs")
    # a revoked grant still needs a well-formed host path
    relative = tamper(archive, tmp_path / "relative.tar", {STORE: edit_store(
        "UPDATE mount_grants SET revoked = 1, host_path = '/srv/../etc'")})  # fmt: skip
    with pytest.raises(BackupError, match="not an absolute, normalised path"):
        verify_backup(relative)


def test_the_attack_restores_nothing_and_leaves_the_host_folder_alone(
    tmp_path: Path, legit: tuple[Path, Path]
) -> None:
    """The reported attack: a session whose id climbs from session-state/ to a host folder,
    with a queued run in it so that the first server on the restored workspace starts it."""
    archive, config = legit
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    target = tmp_path / "r"
    # <target>/ws/agent/session-state/<id> is <sentinel> for this id
    climb = os.path.relpath(sentinel, target / "ws" / "agent" / "session-state")
    edit = edit_store(
        *(f"UPDATE {table} SET session_id = '{climb}'"
          for table in ("runs", "artifacts", "mount_grants", "history")),
        f"UPDATE sessions SET id = '{climb}'",
        "UPDATE runs SET state = 'queued'",
    )  # fmt: skip
    hostile = tamper(archive, tmp_path / "hostile.tar", {STORE: edit})
    checked = runyard(tmp_path, "backup", "verify", hostile, "--config", config)
    assert checked.returncode != 0 and f"Invalid session id '{climb}'" in checked.stderr
    restored = runyard(tmp_path, "backup", "restore", hostile, "--config", config,
                       "--workspace-dir", target / "ws", "--log-dir", target / "logs")  # fmt: skip
    assert restored.returncode != 0 and "Invalid session id" in restored.stderr
    assert not (target / "ws").exists() and not (target / "logs").exists()
    assert state_of(sentinel) == before


def test_manifest_running_tasks_must_be_task_ids(tmp_path: Path) -> None:
    ws, logs, allowed = legit_workspace(tmp_path / "src")
    archive = tmp_path / "b.tar"
    create_backup(ws, logs, archive)
    forged = tmp_path / "forged.tar"
    with tarfile.open(archive) as tar, tarfile.open(forged, "w") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            if member.name == "MANIFEST.json":
                manifest = json.loads(data)
                manifest["running_tasks"] = ["../../etc"]
                data = json.dumps(manifest).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if member.isfile() else None)
    with pytest.raises(BackupError, match="running task '../../etc' is not a task id"):
        verify_backup(forged, allowed_mount_roots=[allowed])
    with pytest.raises(BackupError, match="is not a task id"):
        restore_backup(forged, tmp_path / "r" / "ws", tmp_path / "r" / "logs",
                       allowed_mount_roots=[allowed])  # fmt: skip
    assert not (tmp_path / "r" / "ws").exists()
