"""The journal of what ``backup create`` writes outside the workspace: a killed backup's
partial archive and scratch folder are removed once their writer is gone, and nothing
else ever is: not a live writer's, not a file put in place of the recorded one, not what a
link planted at the recorded path points to, not the entry of another host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from runyard.backup import create_backup
from runyard.backup.partials import PARTIALS_DIR, record_partials, sweep_partials

HOLD = """
import sys, time
from pathlib import Path
from runyard.backup.partials import record_partials
ws, partial, scratch = map(Path, sys.argv[1:4])
partial.write_bytes(b"half an archive")
scratch.mkdir()
record_partials(ws, [partial, scratch])
print("recorded", flush=True)
time.sleep(120)
"""


def _journal(ws: Path) -> list[Path]:
    folder = ws / PARTIALS_DIR
    return sorted(folder.iterdir()) if folder.exists() else []


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(proc.stdout)


def _recorded_by_dead(ws: Path, partial: Path, scratch: Path) -> Path:
    """An entry as a backup killed after journaling leaves it (its pid gone)."""
    partial.write_bytes(b"half")
    scratch.mkdir(exist_ok=True)
    (scratch / "state.db").write_bytes(b"a copy of the store")
    journaled = record_partials(ws, [partial, scratch])
    assert journaled.path is not None
    pid = _dead_pid()
    entry = json.loads(journaled.path.read_bytes())
    entry["pid"] = pid
    moved = journaled.path.with_name(f"backup-{pid}-0000abcd.json")
    moved.write_text(json.dumps(entry))
    journaled.path.unlink()
    return moved


def test_a_finished_backup_leaves_no_entry_and_no_partial(tmp_path: Path) -> None:
    ws, logs = tmp_path / "ws", tmp_path / "logs"
    (ws / "base").mkdir(parents=True)
    logs.mkdir()
    create_backup(ws, logs, tmp_path / "b.tar")
    assert _journal(ws) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar", "logs", "ws"]


def test_a_dead_writers_files_go_and_a_live_writers_stay(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    dead_partial, dead_scratch = tmp_path / ".a.tar.partial-1", tmp_path / "runyard-backup-a"
    entry = _recorded_by_dead(ws, dead_partial, dead_scratch)
    live_partial, live_scratch = tmp_path / ".b.tar.partial-2", tmp_path / "runyard-backup-b"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(ws), str(live_partial), str(live_scratch)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "recorded\n"
        removed = sweep_partials(ws)
        assert sorted(removed) == sorted([str(dead_partial), str(dead_scratch)])
        assert not dead_partial.exists() and not dead_scratch.exists() and not entry.exists()
        assert live_partial.read_bytes() == b"half an archive" and live_scratch.is_dir()
        assert len(_journal(ws)) == 1
    finally:
        holder.kill()
        holder.wait(10)
        assert holder.stdout is not None
        holder.stdout.close()
    assert sorted(sweep_partials(ws)) == sorted([str(live_partial), str(live_scratch)])
    assert _journal(ws) == []


def test_a_reused_pid_is_a_gone_writer(tmp_path: Path) -> None:
    """The pid of the entry runs, but it is another process (its start time differs)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    partial = tmp_path / ".c.tar.partial-3"
    partial.write_bytes(b"half")
    journaled = record_partials(ws, [partial])
    assert journaled.path is not None
    entry = json.loads(journaled.path.read_bytes())
    assert entry["pid"] == os.getpid() and isinstance(entry["started"], int)
    assert sweep_partials(ws) == []  # this very process: alive, kept
    entry["started"] -= 1
    journaled.path.write_text(json.dumps(entry))
    assert sweep_partials(ws) == [str(partial)]


def test_only_the_recorded_file_itself_is_ever_removed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    # replaced after it was recorded: another file now has the name
    replaced, scratch = tmp_path / ".d.tar.partial-4", tmp_path / "runyard-backup-d"
    _recorded_by_dead(ws, replaced, scratch)
    (tmp_path / "other").write_bytes(b"someone else's file")
    os.replace(tmp_path / "other", replaced)
    # a link planted at the recorded path, to a file the attacker wants gone
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    linked, linked_scratch = tmp_path / ".e.tar.partial-5", tmp_path / "runyard-backup-e"
    _recorded_by_dead(ws, linked, linked_scratch)
    os.rename(linked_scratch, tmp_path / "moved-away")
    linked_scratch.symlink_to(victim)
    assert sorted(sweep_partials(ws)) == sorted([str(scratch), str(linked)])
    assert replaced.read_bytes() == b"someone else's file"
    assert (victim / "precious").read_text() == "keep me" and linked_scratch.is_symlink()
    assert _journal(ws) == []


def test_entries_of_another_host_or_garbled_ones(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    partial = tmp_path / ".f.tar.partial-6"
    entry = _recorded_by_dead(ws, partial, tmp_path / "runyard-backup-f")
    record = json.loads(entry.read_bytes())
    entry.write_text(json.dumps({**record, "host": "another-host"}))
    garbled = ws / PARTIALS_DIR / f"backup-{_dead_pid()}-0000beef.json"
    garbled.write_bytes(b'{"kind": "backup", "pid": 1')  # cut short by a kill
    live_garbled = ws / PARTIALS_DIR / f"backup-{os.getpid()}-0000cafe.json"
    live_garbled.write_bytes(b"{")  # being written right now
    assert sweep_partials(ws) == []
    assert partial.exists() and entry.exists()
    assert not garbled.exists() and live_garbled.exists()


def test_a_backup_killed_mid_archive_leaves_what_its_entry_names(tmp_path: Path) -> None:
    ws, logs, scratch_root = tmp_path / "ws", tmp_path / "logs", tmp_path / "tmp"
    for folder in (ws / "base", logs, scratch_root):
        folder.mkdir(parents=True)
    target = tmp_path / "out" / "b.tar.gz"
    target.parent.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(RUNYARD_FAULT_POINT="backup.partial", TMPDIR=str(scratch_root))
    argv = [sys.executable, "-m", "runyard", "backup", "create", str(target),
            "--workspace-dir", str(ws), "--log-dir", str(logs)]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    [partial] = list(target.parent.iterdir())
    assert partial.name.startswith(".b.tar.gz.partial-")
    [scratch] = list(scratch_root.iterdir())
    assert scratch.name.startswith("runyard-backup-")
    assert sorted(sweep_partials(ws)) == sorted([str(partial), str(scratch)])
    assert list(target.parent.iterdir()) == [] and list(scratch_root.iterdir()) == []
    assert _journal(ws) == []
