"""The bubblewrap wrapper: only the mounts are visible, read-only is enforced, no network,
its own PID namespace, and cancelling it stops everything inside."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from agent_support import needs_bwrap

from runyard.executors.base import LaunchSpec, Mount
from runyard.executors.local import LocalExecutor
from runyard.executors.sandbox import BwrapSandbox, bwrap_argv, probe_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def run_sandboxed(tmp_path: Path, script: str, mounts: list[Mount]) -> str:
    inner = LocalExecutor()
    executor = BwrapSandbox(inner)
    log = tmp_path / "sandbox.log"
    spec = LaunchSpec(
        argv=["/bin/sh", "-c", script], log_path=log, cwd=Path("/"),
        env={"PATH": "/usr/bin:/bin"}, mounts=mounts, network=False,
    )  # fmt: skip
    handle = executor.launch(spec)
    assert inner.wait_exit(handle, 20) is not None
    executor.cleanup(handle)
    return log.read_text()


def test_only_mounts_are_visible_and_read_only_is_enforced(tmp_path: Path) -> None:
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir(), ro.mkdir()
    (ro / "f").write_text("original")
    (tmp_path / "host-secret").write_text("secret")
    script = (
        "echo x > /workspace/rw/new && echo rw-ok; "
        "echo y > /workspace/ro/f || echo ro-refused; "
        f"cat {tmp_path}/host-secret || echo host-hidden; "
        "touch /usr/evil || echo usr-readonly; "
        "touch /etc/evil || echo etc-readonly; "
        "ls /root >/dev/null 2>&1 || echo root-hidden"
    )
    mounts = [Mount(rw, "/workspace/rw"), Mount(ro, "/workspace/ro", read_only=True)]
    output = run_sandboxed(tmp_path, script, mounts)
    for marker in ("rw-ok", "ro-refused", "host-hidden", "usr-readonly", "etc-readonly"):
        assert marker in output, output
    assert (rw / "new").read_text() == "x\n"
    assert (ro / "f").read_text() == "original"


def test_no_network_and_own_pid_namespace(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    script = (
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' "
        "2>/dev/null && echo net-open || echo net-closed; echo pid=$$; ls /proc | grep -c '^[0-9]'"
    )
    try:
        output = run_sandboxed(tmp_path, script, [])
    finally:
        listener.close()
    assert "net-closed" in output, output
    pids = int(output.strip().splitlines()[-1])
    assert pids < 10, output  # the host's processes are not visible


def test_cancel_stops_every_process_of_the_sandbox(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    executor = BwrapSandbox(LocalExecutor())
    script = "setsid sleep 299 & echo $! > /workspace/out/child; sleep 299"
    spec = LaunchSpec(
        argv=["/bin/sh", "-c", script], log_path=tmp_path / "log", cwd=Path("/workspace"),
        env={"PATH": "/usr/bin:/bin"}, mounts=[Mount(out, "/workspace/out")],
    )  # fmt: skip
    handle = executor.launch(spec)
    deadline = time.monotonic() + 10
    while not (out / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    before = _sleepers()
    assert before, "the sandboxed sleeps did not start"
    executor.cancel(handle, grace_seconds=2)
    deadline = time.monotonic() + 10
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert executor.poll(handle) is not None
    assert not _sleepers()


def _sleepers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == b"sleep\x00299\x00":
                found.append(int(entry))
    return found


def test_probe_reports_a_broken_bwrap(tmp_path: Path) -> None:
    assert probe_bwrap("/usr/bin/bwrap") is None
    assert "not installed" in str(probe_bwrap(None))
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert "No permissions to create new namespace" in str(probe_bwrap(str(fake)))


def test_mounts_are_bound_parents_first() -> None:
    spec = LaunchSpec(
        argv=["true"], log_path=Path("/dev/null"), network=False,
        mounts=[Mount(Path("/h/f"), "/workspace/in/f", True), Mount(Path("/h"), "/workspace/in")],
    )  # fmt: skip
    argv = bwrap_argv("bwrap", spec)
    assert argv.index("/workspace/in") < argv.index("/workspace/in/f")
    assert argv[argv.index("/workspace/in/f") - 2] == "--ro-bind"
    assert "--unshare-all" in argv and "--share-net" not in argv
    assert "--cap-drop" in argv and "--die-with-parent" in argv


def test_network_only_when_asked(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    check = (
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' "
        "2>/dev/null && echo net-open || echo net-closed"
    )
    inner = LocalExecutor()
    try:
        for network, expected in ((True, "net-open"), (False, "net-closed")):
            log = tmp_path / f"net-{network}.log"
            spec = LaunchSpec(
                argv=["/bin/sh", "-c", check], log_path=log, env={"PATH": "/usr/bin:/bin"},
                network=network,
            )  # fmt: skip
            handle = BwrapSandbox(inner).launch(spec)
            assert inner.wait_exit(handle, 20) is not None
            inner.cleanup(handle)
            assert expected in log.read_text()
    finally:
        listener.close()
