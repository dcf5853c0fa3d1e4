"""``runyard ls`` prints the same listing to a terminal (a rich table, coloured) and to a
pipe (plain columns, without rich): people and scripts read the same rows."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ls(cwd: Path, env: dict[str, str], *, terminal: bool) -> str:
    command = [sys.executable, "-m", "runyard", "ls"]
    if not terminal:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout
    leader, follower = pty.openpty()
    chunks = []
    try:
        with subprocess.Popen(command, cwd=cwd, env=env, stdout=follower,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:  # fmt: skip
            os.close(follower)
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal closed with the command
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in ANSI.sub("", text).splitlines() if line.strip()]


def test_a_pipe_gets_the_terminals_listing_as_plain_text(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(COLUMNS="200", TZ="UTC", TERM="xterm-256color")
    for name in ("a-long-name-widens-the-column", "b"):
        made = subprocess.run(
            [sys.executable, "-m", "runyard", "run", "demo", "x=1", "y=2", "--name", name],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    piped = _ls(tmp_path, env, terminal=False)
    shown = _ls(tmp_path, env, terminal=True)
    assert "\x1b[" not in piped and "\x1b[" in shown  # styles only on the terminal
    assert _lines(piped) == _lines(shown)
    header, *rows = _lines(piped)
    assert header.split("  ")[0].rstrip() == "TASK ID" and "CREATED (UTC)" in header
    assert [row.split()[0] for row in rows] == [
        "base#demo#b",
        "base#demo#" + "a-long-name-widens-the-column",
    ]
    assert [row.split()[1] for row in rows] == ["succeeded", "succeeded"]
