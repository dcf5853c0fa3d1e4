"""``runyard runs TASK_ID`` through the real CLI: one line per run (full run id, state,
times in local time with the zone named, like ``status``, the current one marked), newest first, from the files and through a
server (where ``--json`` is the API's answer); a missing task or a bad id exits non-zero."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from cli_proc import CLI, base_env, cli

from serverproc import start_server

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST"  # the CLI runs with TZ=Asia/Tokyo
LINE = re.compile(
    rf"^(?P<run>[0-9a-f]{{32}})  (?P<state>\w+) *  created {WHEN}  started {WHEN}"
    rf"  finished {WHEN}(?P<current>  current)?$"
)


def local(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--workspace-dir", str(tmp_path / "ws"), "--log-dir", str(tmp_path / "logs")]
    return subprocess.run(
        [*CLI, *args, *where], cwd=tmp_path, env={**base_env(), "TZ": "Asia/Tokyo"},
        capture_output=True, text=True,
        timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_runs_from_the_files(tmp_path: Path) -> None:
    for y in (2, 3):
        done = local(tmp_path, "run", "demo", "x=1", f"y={y}", "--name", "twice", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
    history = tmp_path / "ws" / ".history" / "base" / "base#demo#twice"
    first = json.loads(next(history.glob("*/status.json")).read_text())
    listed = local(tmp_path, "runs", "base#demo#twice")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    matches = [LINE.match(line) for line in lines]
    assert len(lines) == 2 and all(matches), lines
    assert [m["current"] is not None for m in matches if m] == [True, False]
    assert matches[1] and matches[1]["run"] == first["run_id"]
    assert [m["state"] for m in matches if m] == ["succeeded", "succeeded"]
    as_json = json.loads(local(tmp_path, "runs", "base#demo#twice", "--json").stdout)
    assert [r["run_id"] for r in as_json["runs"]] == [m["run"] for m in matches if m]

    missing = local(tmp_path, "runs", "base#demo#nothing")
    assert missing.returncode == 1 and "no task base#demo#nothing" in missing.stderr
    bad = local(tmp_path, "runs", "../../etc")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_runs_through_the_server_match_the_api(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    try:
        for fail in (True, False):
            handle = server.call("submit", task="demo", task_name="srv", x=1, y=2, fail=fail)
            answer = handle["answer"]
            server.call("wait_task", task_id=answer["task_id"], run_id=answer["run_id"])
        done = cli(server, "runs", "base#demo#srv", "--json")
        assert done.returncode == 0, done.stderr
        with server.client() as client:
            api = client.get("/api/v1/tasks/base%23demo%23srv/runs").json()
        assert json.loads(done.stdout) == api
        assert [r["state"] for r in api["runs"]] == ["succeeded", "failed"]
        text = cli(server, "runs", "base#demo#srv").stdout.splitlines()
        assert [line.split()[:2] for line in text] == [
            [r["run_id"], r["state"]] for r in api["runs"]
        ]
        missing = cli(server, "runs", "base#demo#nothing")
        assert missing.returncode == 1 and "no task base#demo#nothing" in missing.stderr
    finally:
        server.stop()
