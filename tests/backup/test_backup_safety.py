"""What a backup refuses and detects: damage, crafted members, links, busy targets; and
that memory stays flat with a large file."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from runyard.backup import BackupError, create_backup, restore_backup, verify_backup

BIG = 200 << 20


def status_record(task_id: str, **changes: object) -> dict[str, object]:
    """A valid ``status.json`` of a finished task, with ``changes`` over it."""
    task_type, task, name = task_id.split("#")
    record = {
        "task_id": task_id, "run_id": "f" * 32, "task_type": task_type, "task_name": task,
        "state": "succeeded", "config": {"task_name": name}, "created_at": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    return {**record, **changes}


def small_workspace(root: Path) -> tuple[Path, Path]:
    ws, logs = root / "ws", root / "logs"
    task = ws / "base" / "base#demo#a"
    task.mkdir(parents=True)
    (task / "status.json").write_text(json.dumps(status_record("base#demo#a")))
    (task / "result.txt").write_bytes(b"0123456789" * 1000)
    (logs / "base").mkdir(parents=True)
    (logs / "base" / "a.log").write_text("hello\n")
    (ws / "server.json").write_text('{"token": "secret"}')
    return ws, logs


def test_verify_detects_a_flipped_byte(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    archive = tmp_path / "b.tar"
    create_backup(ws, logs, archive)
    verify_backup(archive)
    raw = bytearray(archive.read_bytes())
    at = raw.index(b"0123456789") + 5000
    raw[at] ^= 0x01
    archive.write_bytes(bytes(raw))
    with pytest.raises(BackupError, match="result.txt: size or sha256 differs"):
        verify_backup(archive)
    with pytest.raises(BackupError, match="differs"):
        restore_backup(archive, tmp_path / "r" / "ws", tmp_path / "r" / "logs")
    assert not (tmp_path / "r" / "ws").exists()  # a failed restore leaves nothing behind


def test_server_token_is_not_archived_and_links_are_not_followed(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    secret = tmp_path / "outside.txt"
    secret.write_text("host secret")
    (ws / "base" / "base#demo#a" / "leak").symlink_to(secret)
    (ws / "base" / "linkdir").symlink_to(tmp_path)
    archive = tmp_path / "b.tar.gz"
    manifest = create_backup(ws, logs, archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        contents = b"".join(
            tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        )
    assert "workspace/server.json" not in names and b"secret" not in contents.replace(
        b'"secret"', b""
    )
    assert b"host secret" not in contents
    skipped = {entry["path"]: entry["reason"] for entry in manifest.skipped}
    assert "symlink" in skipped["workspace/base/base#demo#a/leak"]
    assert "symlink" in skipped["workspace/base/linkdir"]
    assert "credentials" in skipped["workspace/server.json"]


def test_submits_in_progress_are_left_out(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    half = ws / ".staging" / ".staging-0123456789ab-base#demo#half"
    half.mkdir(parents=True)
    (half / "status.json").write_text("{}")
    (ws / ".claims").write_bytes(b"")
    archive = tmp_path / "b.tar"
    manifest = create_backup(ws, logs, archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert not [name for name in names if ".staging" in name or ".claims" in name]
    skipped = {entry["path"]: entry["reason"] for entry in manifest.skipped}
    assert "in progress" in skipped["workspace/.staging"]
    assert "in progress" in skipped["workspace/.claims"]


def test_restore_refuses_a_non_empty_target(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    archive = tmp_path / "b.tar"
    create_backup(ws, logs, archive)
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(BackupError, match="not empty"):
        restore_backup(archive, target, tmp_path / "newlogs")
    assert sorted(os.listdir(target)) == ["keep.txt"]
    assert not (tmp_path / "newlogs").exists()


def crafted(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    """A gzip archive whose first member is ``member``, then a valid-looking manifest."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
        manifest = {"format": "runyard-backup", "version": 1, "runyard_version": "x",
                    "workspace_format": 1, "created_at": "", "source": {"workspace_dir": "/a",
                    "log_dir": "/b"}, "files": [], "dirs": [], "running_tasks": [],
                    "skipped": [], "changed_while_read": []}  # fmt: skip
        raw = json.dumps(manifest).encode()
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    path = tmp_path / "crafted.tgz"
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_member("workspace/../../escaped.txt", size=3), "'..'"),
        (_member("/tmp/absolute.txt", size=3), "absolute"),
        (_member("workspace/base/evil", tarfile.SYMTYPE, "/etc"), "symbolic links"),
        (_member("workspace/hard", tarfile.LNKTYPE, "/etc/passwd"), "hard links"),
        (_member("workspace/dev", tarfile.CHRTYPE), "devices"),
        (_member("elsewhere/x.txt", size=3), "not under workspace/ or logs/"),
    ],
)
def test_restore_and_verify_refuse_unsafe_members(
    tmp_path: Path, member: tarfile.TarInfo, why: str
) -> None:
    archive = crafted(tmp_path, member, b"bad" if member.isfile() else b"")
    with pytest.raises(BackupError, match=why):
        restore_backup(archive, tmp_path / "r" / "ws", tmp_path / "r" / "logs")
    with pytest.raises(BackupError, match=why):
        verify_backup(archive)
    assert not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.txt"))


# VmHWM is this process's own peak: getrusage's ru_maxrss carries the parent's peak over
# exec (a large pytest process would be measured instead of the CLI)
RSS_PROBE = """
import re, sys
from runyard.cli.main import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
peak = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print("maxrss_kb", peak, "code", code)
"""


def peak_rss_kb(*args: str | Path) -> int:
    argv = [sys.executable, "-c", RSS_PROBE, *map(str, args)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=110)
    words = done.stdout.split()
    assert words[-1] == "0", done.stdout + done.stderr
    return int(words[words.index("maxrss_kb") + 1])


def test_memory_stays_flat_with_a_200_mb_artifact(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    big = ws / "base" / "base#demo#a" / "model.bin"
    with open(big, "wb") as out:
        chunk = os.urandom(1 << 20)
        for _ in range(BIG >> 20):
            out.write(chunk)
    archive = tmp_path / "big.tar"
    create_kb = peak_rss_kb("backup", "create", archive, "--workspace-dir", ws, "--log-dir", logs)
    restore_kb = peak_rss_kb("backup", "restore", archive, "--workspace-dir", tmp_path / "r",
                             "--log-dir", tmp_path / "rl")  # fmt: skip
    assert (tmp_path / "r" / "base" / "base#demo#a" / "model.bin").stat().st_size == BIG
    # an interpreter with typer and rich is ~60 MB; holding the file would add 200 MB
    assert create_kb < 120_000, create_kb
    assert restore_kb < 120_000, restore_kb


def test_restored_submitter_records_name_no_host_process(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    record = ws / ".submitters" / "base" / "base#demo#a.json"
    record.parent.mkdir(parents=True)
    by = {"session_id": "s1", "run_id": "r1"}
    record.write_text(json.dumps({"task_id": "base#demo#a", "run_id": "f" * 32,
                                  "submitted_by": by, "pid": os.getpid(), "start_time": 1}))  # fmt: skip
    archive = tmp_path / "b.tar"
    create_backup(ws, logs, archive)
    restore_backup(archive, tmp_path / "r" / "ws", tmp_path / "r" / "logs")
    restored = json.loads(
        (tmp_path / "r" / "ws" / ".submitters" / "base" / "base#demo#a.json").read_text()
    )
    assert restored["submitted_by"] == by  # who submitted it still decides what it may see
    assert "pid" not in restored and "start_time" not in restored


def test_a_restored_workspace_is_another_kubernetes_instance(tmp_path: Path) -> None:
    ws, logs = small_workspace(tmp_path)
    (ws / "kubernetes-instance").write_text("ry-original\n")
    mark = ws / ".kubernetes" / "base" / "base#demo#a.json"
    mark.parent.mkdir(parents=True)
    mark.write_text(json.dumps({"task_id": "base#demo#a", "run_id": "f" * 32, "handle": None}))
    archive = tmp_path / "b.tar"
    create_backup(ws, logs, archive)
    restore_backup(archive, tmp_path / "r" / "ws", tmp_path / "r" / "logs")
    restored = tmp_path / "r" / "ws"
    # neither the original's instance id (its sweeper's label) nor its Jobs' marks
    assert not (restored / "kubernetes-instance").exists()
    assert not (restored / ".kubernetes").exists()
    assert (restored / "base" / "base#demo#a" / "result.txt").exists()
    assert mark.exists() and (ws / "kubernetes-instance").exists()  # the source untouched
