"""The Pipelines section of docs/workflows.md runs as written against a real server: the
issue's pipeline (a file run by ``runyard pipeline run --wait``), the client block after it,
and the wire form posted as it is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverproc import ServerProcess, start_server, until

DOC = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## Pipelines\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", section(), re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("docs") / "srv", config={"max_concurrent_tasks": 4})
    try:
        yield srv
    finally:
        srv.stop()


def env_of(server: ServerProcess) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return {**env, "RUNYARD_URL": server.url, "RUNYARD_TOKEN": server.token or ""}


def test_the_issues_pipeline_runs_from_a_file(server: ServerProcess, tmp_path: Path) -> None:
    pipeline, _client = blocks("python")
    (tmp_path / "flows.py").write_text(pipeline)
    command = blocks("sh")[0].splitlines()[0].split("#")[0].split()
    assert command[:3] == ["runyard", "pipeline", "run"], command
    done = subprocess.run(
        [sys.executable, "-m", *command, "--json"], cwd=tmp_path, env=env_of(server),
        capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(done.stdout)
    assert run["state"] == "succeeded" and run["params"] == {"dataset": "wine"}
    keys = [step["key"] for step in run["steps"]]
    assert keys == ["research-etl", "research-train", "research-train-2", "research-analysis"]
    report = server.call("status", task_id=run["steps"][-1]["task_id"])["answer"]
    assert report["result"]["models"] == 2


def test_the_client_block_runs_after_it(server: ServerProcess, tmp_path: Path) -> None:
    pipeline, client = blocks("python")
    done = subprocess.run(
        [sys.executable, "-c", pipeline + "\n" + client], cwd=tmp_path, env=env_of(server),
        capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("succeeded [('research-etl', 'succeeded'),"), done.stdout


def test_the_wire_form_is_what_the_server_takes(server: ServerProcess) -> None:
    (wire,) = blocks("json")
    with server.client() as client:
        reply = client.post("/api/v1/pipelines/runs", json=json.loads(wire))
        assert reply.status_code == 200, reply.text
        path = f"/api/v1/pipelines/runs/{reply.json()['id']}"
        final = until(lambda: (r := client.get(path).json())["state"] != "running" and r,
                      timeout=120)  # fmt: skip
    assert final["state"] == "succeeded", final
