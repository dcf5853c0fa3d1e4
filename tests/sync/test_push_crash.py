"""kill -9 the receiver in the middle of a push, push again: it completes, nothing half-applied."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from sync_helpers import eventually, push_json, run_task, sha256, task_dir

from serverproc import start_server

BIG_MB = 96


def _staging_with_data(base: Path) -> bool:
    for entry in base.iterdir() if base.is_dir() else ():
        if entry.name.startswith(".staging-") and (entry / "big.bin").exists():
            return (entry / "big.bin").stat().st_size > 0
    return False


def test_kill_9_of_the_receiver_mid_push_then_push_again(tmp_path: Path) -> None:
    sender = start_server(tmp_path / "a")
    receiver = start_server(tmp_path / "b")
    try:
        small = [run_task(sender, "demo", x=i, y=1, task_name=f"s{i}")["task_id"] for i in range(3)]
        big = run_task(
            sender, "command", shell=True, task_name="big",
            command=f"head -c {BIG_MB << 20} /dev/urandom > big.bin",
        )["task_id"]  # fmt: skip
        argv = [
            sys.executable, "-m", "runyard", "sync", "push", "--json", big,
            "--workspace-dir", str(sender.workspace), "--log-dir", str(sender.log_dir),
            "--url", receiver.url, "--token", str(receiver.token),
        ]  # fmt: skip
        pusher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert eventually(lambda: _staging_with_data(receiver.workspace / ".staging"), 60)
        receiver.stop(signal.SIGKILL)
        _, err = pusher.communicate(timeout=60)
        assert pusher.returncode != 0 and "sync with" in err
        assert not task_dir(receiver, big).exists()  # nothing half-applied

        receiver = start_server(tmp_path / "b")
        hidden = [p for p in (receiver.workspace / "base").iterdir() if p.name.startswith(".")]
        hidden += list((receiver.workspace / ".staging").iterdir())
        assert hidden == []  # the staging folder was swept at start
        report = push_json(sender, receiver)
        assert sorted(report["sent"]) == sorted([big, *small]) and report["refused"] == []
        assert sha256(task_dir(receiver, big) / "big.bin") == sha256(
            task_dir(sender, big) / "big.bin"
        )
        listed = receiver.call("list_task_ids")["answer"]
        assert set(listed) >= {big, *small}
        assert push_json(sender, receiver)["sent"] == []
    finally:
        receiver.stop()
        sender.stop()
