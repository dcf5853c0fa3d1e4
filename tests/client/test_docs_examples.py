"""Every python block of docs/python-client.md runs, as written, against a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from serverproc import start_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-client.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def doc_blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_doc_has_examples_for_every_part() -> None:
    code = "\n".join(doc_blocks())
    for needed in ("Client()", "find_server", ".submit(", ".wait(", "WaitTimeout", "next_cursor",
                   "iter_tasks", "AsyncClient", ".stream(", "agents.upload", "wait_run",
                   ".answer(", "list_files", "download", "JobFailed"):  # fmt: skip
        assert needed in code, needed


def test_every_example_runs(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", config={"agent_sandbox": "none"})
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        env.update(RUNYARD_URL=server.url, RUNYARD_TOKEN=server.token or "")
        for number, code in enumerate(doc_blocks()):
            script = tmp_path / f"example_{number}.py"
            script.write_text(code, encoding="utf-8")
            done = subprocess.run(
                [sys.executable, str(script)], cwd=tmp_path, env=env,
                capture_output=True, text=True, timeout=100,
            )  # fmt: skip
            assert done.returncode == 0, f"example {number}:\n{code}\n{done.stderr}"
            assert done.stdout.strip(), f"example {number} printed nothing"
        answered = subprocess.run(
            [sys.executable, "-c", "from runyard.client import Client\n"
             "c = Client()\nr = c.agents.list_runs()[0]\nprint(c.agents.answer(r))"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert answered.returncode == 0 and answered.stdout.strip() not in ("", "None")
    finally:
        server.stop()
