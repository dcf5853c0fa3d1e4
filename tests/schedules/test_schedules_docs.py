"""docs/workflows.md, Schedules: its runyard.yaml is a server's config, its commands and
its Python run against that server, and its tick_argument example loads."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runyard.config import Settings
from serverproc import start_server

DOC = Path(__file__).parents[2] / "docs" / "workflows.md"


def section() -> str:
    text = DOC.read_text()
    start = text.index("## Schedules")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), flags=re.S)


def test_the_documented_schedules_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, tick_example = (yaml.safe_load(block) for block in blocks("yaml"))
    Settings(**tick_example)  # the tick_argument example is valid settings
    srv = start_server(tmp_path / "srv", config=config)
    try:
        for line in blocks("sh")[0].strip().splitlines():
            argv = shlex.split(line)
            assert argv[0] == "runyard"
            done = subprocess.run(
                [sys.executable, "-m", "runyard", *argv[1:]], capture_output=True, text=True,
                env=srv.cli_env(), cwd=srv.root, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, (line, done.stdout, done.stderr)
        monkeypatch.setenv("RUNYARD_URL", srv.url)
        monkeypatch.setenv("RUNYARD_TOKEN", srv.token or "")
        namespace: dict[str, object] = {}
        exec(compile(blocks("python")[0], str(DOC), "exec"), namespace)  # noqa: S102
        assert namespace["record"]["outcome"] == "submitted"  # type: ignore[index]
        listed = {s["name"]: s for s in srv.call("list_schedules", include_history=True)["answer"]}
        assert set(listed) == {"report-after-close", "download_at_1600", "hourly-sum"}
        kinds = [r["kind"] for r in listed["report-after-close"]["history"]]
        assert kinds == ["trigger"] + ["backfill"] * 5  # Monday to Friday
        assert listed["download_at_1600"]["task"] == "demo"
    finally:
        srv.stop()
