"""A stop always ends: SIGTERM while sandboxed agent runs are in the middle of Job API calls
over their socket ends the server within cancel_grace_seconds plus a few seconds, in order
(exit status 0), with the cut calls answered 503 and no child left a zombie."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from agent_support import needs_bwrap
from api_helpers import agent_server, api, create_run, new_session, wait_file

from runyard.api.stopping import STOP_MARGIN_SECONDS
from serverproc import kill_strays

GRACE = 2.0
EXIT_BOUND = GRACE + 5.0
RUNS = {"stay": 4, "leave": 4}  # runs that call again after the stop, and runs that end
ZOMBIE_SECONDS = 1.0  # the longest a child may wait to be reaped while the server stops


def children(pid: int) -> dict[int, str]:
    """The children of ``pid`` and their states (R, S, Z...), read from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found[int(entry.name)] = fields[0]
    return found


@pytest.mark.sandbox
@needs_bwrap
def test_sigterm_during_socket_calls_ends_the_server_in_bounded_time(tmp_path: Path) -> None:
    total = sum(RUNS.values())
    server = agent_server(
        tmp_path, "bwrap", cancel_grace_seconds=GRACE, max_concurrent_runs=total,
        max_concurrent_tasks=total, agent_task_slots=1,
    )  # fmt: skip
    try:
        with api(server) as client:
            runs = [
                create_run(client, new_session(client, f"{mode}{i}"), mode, package="socket_caller")
                for mode, count in RUNS.items()
                for i in range(count)
            ]
            for run in runs:
                wait_file(client, run["id"], "calling", timeout=90)
        time.sleep(1.0)  # every run is inside its wait_task now
        before = children(server.proc.pid)
        assert len(before) >= total, before
        zombie_since: dict[int, float] = {}
        longest_zombie = 0.0
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        while server.proc.poll() is None and time.monotonic() - started < EXIT_BOUND:
            now = time.monotonic()
            for pid, state in children(server.proc.pid).items():
                if state == "Z":
                    longest_zombie = max(longest_zombie, now - zombie_since.setdefault(pid, now))
            time.sleep(0.05)
        took = time.monotonic() - started
        code = server.proc.poll()
        if code is None:
            server.proc.kill()
            server.proc.wait(10)
            pytest.fail(f"the server did not stop within {EXIT_BOUND} s of SIGTERM")
        log = (server.log_dir / "server.log").read_text(errors="replace")
        assert code == 0, f"exit status {code}: {log[-3000:]}"
        assert took < EXIT_BOUND
        print(f"stopped in {took:.2f} s; longest zombie {longest_zombie:.2f} s")
        assert longest_zombie < ZOMBIE_SECONDS, f"a child stayed a zombie {longest_zombie:.1f} s"
        cut = re.findall(r'run-socket "POST /jobs/wait_task" (\d+)', log)
        assert cut and set(cut) == {"503"}, cut  # answered, not a 500 and a traceback
        assert "Exception in ASGI application" not in log
        assert f"{GRACE + STOP_MARGIN_SECONDS:.1f} s" not in log  # not ended by the bound
    finally:
        server.stop()
        kill_strays(tmp_path)
