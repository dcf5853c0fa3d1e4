"""A server's start sweeps what kills left in temp names: a history copy cut short by a
server killed mid-rerun, a partial archive and scratch folder of a killed ``backup
create``; each kind is named in one line of the server log, and a live writer's temp
entries (a CLI holding the task's claim, a backup whose pid runs) are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from runyard.backup.partials import PARTIALS_DIR
from serverproc import ServerProcess, start_server

HOLD_CLAIM = """
import os, sys
from pathlib import Path
from runyard.runtime.creation import claim
from runyard.workspace.layout import Workspace
ws = Workspace.open(Path(sys.argv[1]), Path(sys.argv[2]))
with claim(ws, sys.argv[3]):
    os.mkdir(sys.argv[4])  # a copy this process is making right now
    print("held", flush=True)
    sys.stdin.read()
"""
HOLD_BACKUP = """
import sys
from pathlib import Path
from runyard.backup.partials import record_partials
ws, partial = Path(sys.argv[1]), Path(sys.argv[2])
partial.write_bytes(b"an archive being written")
record_partials(ws, [partial])
print("held", flush=True)
sys.stdin.read()
"""
SWEPT_WITHIN = 10.0


def _until(check, timeout: float = SWEPT_WITHIN):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "not swept in time"
        time.sleep(0.05)
    return found


def _server_log(server: ServerProcess) -> str:
    path = server.log_dir / "server.log"
    return path.read_text() if path.exists() else ""


def _temps(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(".tmp-"))


def _holder(script: str, *args: object) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    proc.communicate(timeout=30)


def _kill_mid_rerun(root: Path) -> str:
    """A server killed -9 as it moves a replaced run into history (nothing moved yet), with
    the temp folder a records copy cut short leaves (where history is on another file
    system, or an earlier version copied) beside it; answers the task's id."""
    server = start_server(root, env={"RUNYARD_FAULT_POINT": "history.staged"})
    try:
        first = server.call("submit", task="demo", x=1, y=2, task_name="again")["answer"]
        _until(lambda: server.call("status", task_id=first["task_id"])["answer"]["state"]
               == "succeeded", 60)  # fmt: skip
        with pytest.raises(httpx.TransportError):
            server.call("submit", task="demo", x=1, y=2, task_name="again")
        assert server.proc.wait(30) == -signal.SIGKILL
    finally:
        server.stop(keep_runs=True)
    staging = server.workspace / ".history" / ".staging"
    assert _temps(staging) == []
    copy = staging / f".tmp-{'ab' * 6}-{first['task_id']}"
    copy.mkdir()
    (copy / "status.json").write_text("{}")
    assert os.listdir(server.workspace / ".history" / "base" / first["task_id"]) == []
    return str(first["task_id"])


def _kill_mid_backup(server_root: Path, out: Path) -> list[Path]:
    """``runyard backup create`` killed -9 with its archive half written: answers the
    partial archive and the scratch folder it left."""
    scratch_root = out / "tmp"
    scratch_root.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(RUNYARD_FAULT_POINT="backup.partial", TMPDIR=str(scratch_root))
    argv = [sys.executable, "-m", "runyard", "backup", "create", str(out / "b.tar.gz"),
            "--workspace-dir", str(server_root / "ws"),
            "--log-dir", str(server_root / "logs")]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    [partial] = [p for p in out.iterdir() if p.name.startswith(".b.tar.gz.partial-")]
    [scratch] = list(scratch_root.iterdir())
    return [partial, scratch]


def test_the_start_sweeps_what_kills_left_and_keeps_what_live_writers_hold(
    tmp_path: Path,
) -> None:
    root = tmp_path / "srv"
    task_id = _kill_mid_rerun(root)
    ws = root / "ws"
    staging = ws / ".history" / ".staging"
    [crashed] = _temps(staging)
    left = _kill_mid_backup(root, tmp_path / "out")
    # live writers beside the next server: a CLI copying another task's history under its
    # claim, and a backup still writing its archive
    held_task = "base#demo#held"
    live_copy = f".tmp-{'0' * 12}-{held_task}"
    claim_holder = _holder(HOLD_CLAIM, ws, root / "logs", held_task, staging / live_copy)
    live_partial = tmp_path / "out" / ".live.tar.partial-1"
    backup_holder = _holder(HOLD_BACKUP, ws, live_partial)
    try:
        server = start_server(root)
        try:
            _until(lambda: _temps(staging) == [live_copy] and not any(p.exists() for p in left))
            said = _until(lambda: "partial backups" in (text := _server_log(server)) and text)
            assert f"removed 1 history temp folders: .history/.staging/{crashed}\n" in said
            assert all(str(path) in said for path in left)
            assert live_partial.read_bytes() == b"an archive being written"
            assert len(os.listdir(ws / PARTIALS_DIR)) == 1  # the live backup's entry
            assert str(live_partial) not in said and live_copy not in said
            # the replaced run is still the task: the kill lost nothing
            assert server.call("status", task_id=task_id)["answer"]["state"] == "succeeded"
        finally:
            server.stop()
    finally:
        for holder in (claim_holder, backup_holder):
            holder.kill()
            _release(holder)
