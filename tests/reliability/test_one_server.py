"""One server per workspace: a second serve exits at once naming the first; CLI still works."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from serverproc import start_server


def test_second_server_on_a_workspace_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = start_server(tmp_path / "one")
    try:
        started = time.monotonic()
        second = subprocess.run(
            [sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", "0",
             "--workspace-dir", str(first.workspace), "--log-dir", str(tmp_path / "logs2")],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert second.returncode != 0
        assert time.monotonic() - started < 30
        said = second.stdout + second.stderr
        assert f"pid {first.proc.pid}" in said and first.url in said, said
        assert first.token and first.token not in said  # server.json holds it: never told
        assert first.call("list_task_ids")["success"] is True  # the first still serves
        # file-mode commands beside the server
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        env.update(RUNYARD_WORKSPACE_DIR=str(first.workspace), RUNYARD_LOG_DIR=str(first.log_dir))
        run = subprocess.run(
            [sys.executable, "-m", "runyard", "run", "demo", "x=1", "y=2"],
            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        listed = subprocess.run(
            [sys.executable, "-m", "runyard", "ls"],
            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert listed.returncode == 0 and "demo" in listed.stdout, listed.stdout + listed.stderr
    finally:
        first.stop()
    again = start_server(tmp_path / "one")  # the lock died with the server
    try:
        assert again.call("list_task_ids")["success"] is True
    finally:
        again.stop()
