"""Every python block of docs/python-client.md runs, as written, against a real server."""

from __future__ import annotations

import json
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


RUNNER = """
import contextlib, io, json, sys, traceback
blocks = json.load(open(sys.argv[1]))
printed = []
for number, code in enumerate(blocks):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"example_{number}", "exec"), {"__name__": "__main__"})
    except BaseException:
        print(f"example {number} failed:\\n{code}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
    printed.append(out.getvalue())
print(json.dumps(printed))
"""


def test_every_example_runs(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", config={"agent_sandbox": "none"})
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        env.update(RUNYARD_URL=server.url, RUNYARD_TOKEN=server.token or "")
        blocks = tmp_path / "blocks.json"
        blocks.write_text(json.dumps(doc_blocks()), encoding="utf-8")
        # one interpreter runs the blocks in order, each in a fresh namespace, as a reader
        # would paste them one after the other
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, str(blocks)], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=100,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        assert len(printed) == len(doc_blocks()) and all(text.strip() for text in printed)
        assert any("succeeded" in text for text in printed)
        state, answer = printed[-2].splitlines()[:2]  # the agent-run example: state, answer
        assert state == "succeeded" and answer.strip() not in ("", "None"), printed[-2]
    finally:
        server.stop()
