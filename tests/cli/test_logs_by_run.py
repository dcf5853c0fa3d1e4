"""``runyard logs ID --run RUN`` prints the log of that run, an earlier kept one too, from
the files and through a server; an unknown run exits non-zero without a traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_proc import CLI, base_env

from serverproc import start_server


def runyard(tmp_path: Path, *args: str, env: dict[str, str] | None = None, local: bool = True):
    where = ["--workspace-dir", str(tmp_path / "ws"), "--log-dir", str(tmp_path / "logs")]
    return subprocess.run(
        [*CLI, *args, *(where if local else [])], cwd=tmp_path, env=env or base_env(),
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def two_runs(tmp_path: Path, **kw) -> list[str]:
    run_ids = []
    for y in (2, 3):
        done = runyard(tmp_path, "run", "demo", "x=1", f"y={y}", "--name", "twice", "--json", **kw)
        assert done.returncode == 0, done.stdout + done.stderr
        run_ids.append(json.loads(done.stdout)["run_id"])
    return run_ids


def test_logs_of_an_earlier_run_from_the_files(tmp_path: Path) -> None:
    first, second = two_runs(tmp_path)
    earlier = runyard(tmp_path, "logs", "base#demo#twice", "--run", first)
    assert earlier.returncode == 0, earlier.stderr
    assert "Demo result=3" in earlier.stdout and "result=4" not in earlier.stdout
    current = runyard(tmp_path, "logs", "base#demo#twice")
    assert "Demo result=4" in current.stdout
    tail = runyard(tmp_path, "logs", "base#demo#twice", "--run", first, "-n", "1")
    assert tail.returncode == 0 and tail.stdout.count("\n") <= 1
    unknown = runyard(tmp_path, "logs", "base#demo#twice", "--run", "0" * 32)
    assert unknown.returncode != 0 and "Traceback" not in unknown.stderr
    escape = runyard(tmp_path, "logs", "base#demo#twice", "--run", "../../../etc/passwd")
    assert escape.returncode != 0 and "root:" not in escape.stdout + escape.stderr


def test_logs_of_an_earlier_run_through_the_server(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    try:
        run_ids = []
        for y in (2, 3):
            handle = server.call("submit", task="demo", task_name="srv", x=1, y=y)["answer"]
            server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
            run_ids.append(handle["run_id"])
        env = server.cli_env()
        earlier = runyard(tmp_path, "logs", "base#demo#srv", "--run", run_ids[0], env=env,
                          local=False)  # fmt: skip
        assert earlier.returncode == 0, earlier.stderr
        assert "Demo result=3" in earlier.stdout and "result=4" not in earlier.stdout
        unknown = runyard(tmp_path, "logs", "base#demo#srv", "--run", "0" * 32, env=env,
                          local=False)  # fmt: skip
        assert unknown.returncode != 0 and "Traceback" not in unknown.stderr
    finally:
        server.stop()
