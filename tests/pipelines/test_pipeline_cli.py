"""``runyard pipeline run|status|list|cancel`` against a real server: a three-step pipeline
file runs in dependency order, parameters override defaults, cancel ends the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serverproc import ServerProcess, start_server, until

THREE_STEPS = """
from runyard import Pipeline

pipe = Pipeline("three", params={"word": "default", "pause": 0.3})
first = pipe.task("command", key="first", command="sleep 0.3; echo first > out.txt", shell=True)
second = pipe.task("command", key="second", depends_on=[first], shell=True,
                   command="echo " + "second" + " > out.txt")
pipe.task("demo", key="third", depends_on=[second], x=1, y=2,
          source_tasks=[first])
"""

WITH_PARAM = """
from runyard import Pipeline

echo = Pipeline("echo", params={"word": "default"})
echo.task("command", key="say", command=echo.param("word"), shell=True)
other = Pipeline("other")
other.task("demo", x=1, y=1)
"""

GATED = """
from runyard import Pipeline

pipe = Pipeline("gated")
gate = pipe.task("command", key="gate", shell=True,
                 command="while [ ! -e go ]; do sleep 0.05; done")
middle = pipe.task("demo", key="middle", depends_on=[gate], x=1, y=2)
pipe.task("demo", key="last", depends_on=[middle], x=2, y=3)
"""


BROKEN = """
from runyard import Pipeline

pipe = Pipeline("broken")
first = pipe.task("demo", x=1, y=2)
second = pipe.task("demo", depends_on=[first], x=3, y=4)
pipe.task("no_such_task", depends_on=[second])
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path / "srv", token="pipe-secret", config={"max_concurrent_tasks": 4})
    try:
        yield srv
    finally:
        srv.stop()


def cli(server: ServerProcess, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in server.cli_env().items()}
    return subprocess.run(
        [sys.executable, "-m", "runyard", "pipeline", *args], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def status(server: ServerProcess, task_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = server.call("status", task_id=task_id)["answer"]
    return answer


def test_a_three_step_file_runs_every_step_in_dependency_order(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "flow.py").write_text(THREE_STEPS)
    done = cli(server, "run", "flow.py", "--wait", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(done.stdout)
    assert run["state"] == "succeeded" and run["pipeline"] == "three"
    steps = {step["key"]: step for step in run["steps"]}
    assert [s["state"] for s in steps.values()] == ["succeeded"] * 3
    suffix = run["id"].rsplit("-", 1)[1]
    assert steps["first"]["task_id"] == f"base#command#{suffix}-first"
    first, second, third = (status(server, steps[k]["task_id"]) for k in steps)
    assert second["started_at"] > first["finished_at"]
    assert third["started_at"] > second["finished_at"]
    assert third["result"]["result"] == 3
    lineage = set(third["config"]["source_tasks"].split(","))
    assert lineage == {first["task_id"], second["task_id"]}  # a step reference and depends_on

    shown = cli(server, "status", run["id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"Pipeline run {run['id']} (three): succeeded" in shown.stdout
    assert "third" in shown.stdout and "after second" in shown.stdout
    listed = cli(server, "list", cwd=tmp_path)
    assert listed.returncode == 0 and run["id"] in listed.stdout
    assert "3/3 succeeded" in listed.stdout


def test_params_override_the_defaults_and_name_picks_the_pipeline(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "flows.py").write_text(WITH_PARAM)
    ambiguous = cli(server, "run", "flows.py", cwd=tmp_path)
    assert ambiguous.returncode != 0 and "2 pipelines" in ambiguous.stderr
    done = cli(server, "run", "flows.py:echo", "word=echo overridden", "--wait", "--json",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(done.stdout)
    assert run["params"] == {"word": "echo overridden"}
    said = status(server, run["steps"][0]["task_id"])
    assert said["config"]["command"] == "echo overridden"
    unknown = cli(server, "run", "flows.py:echo", "colour=red", cwd=tmp_path)
    assert unknown.returncode != 0 and "no parameter colour" in unknown.stderr


def test_cancel_ends_the_running_step_and_the_waiting_ones(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "gated.py").write_text(GATED)
    started = cli(server, "run", "gated.py", "--json", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)
    gate, middle, last = (step["task_id"] for step in run["steps"])
    until(lambda: status(server, gate)["state"] == "running")
    assert status(server, middle)["waiting_for"] == [gate]

    done = cli(server, "cancel", run["id"], "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer["cancelled"]) == {gate, middle, last}
    until(lambda: status(server, gate)["state"] == "cancelled")
    for task_id in (middle, last):
        ended = status(server, task_id)
        assert ended["state"] == "cancelled" and ended["started_at"] is None, ended
    shown = cli(server, "status", run["id"], "--json", cwd=tmp_path)
    assert json.loads(shown.stdout)["state"] == "cancelled"
    again = cli(server, "cancel", run["id"], "--json", cwd=tmp_path)
    assert json.loads(again.stdout)["cancelled"] == []
    missing = cli(server, "status", "three-20260101-000000-abcdef", cwd=tmp_path)
    assert missing.returncode != 0 and "No pipeline run" in missing.stderr
    assert os.path.isdir(server.workspace / ".pipelines")


def test_a_bad_step_name_makes_nothing(server: ServerProcess, tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    before = server.call("list_task_ids")["answer"]
    done = cli(server, "run", "broken.py", "--wait", cwd=tmp_path)
    assert done.returncode != 0
    assert "Step no-such-task: Unknown Task: no_such_task" in done.stderr, done.stderr
    assert server.call("list_task_ids")["answer"] == before
    assert not (server.workspace / ".pipelines").exists()


def test_a_file_that_fails_to_load_says_where_and_why(
    server: ServerProcess, tmp_path: Path
) -> None:
    empty = cli(server, "list", cwd=tmp_path)
    assert empty.returncode == 0 and "No pipeline runs yet" in empty.stdout
    (tmp_path / "typo.py").write_text("from runyard import Pipeline\npipe = Pipeline('x'\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('no data today')\n")
    (tmp_path / "bad_param.py").write_text(
        "from runyard import Pipeline\np = Pipeline('x')\np.task('demo', x=p.param('n'))\n"
    )
    expected = {
        "typo.py": "typo.py failed to load: SyntaxError",
        "raises.py": "raises.py failed to load: RuntimeError: no data today",
        "bad_param.py": "Pipeline x has no parameter 'n'",
        "missing.py": "No pipeline file 'missing.py'",
    }
    for name, said in expected.items():
        done = cli(server, "run", name, cwd=tmp_path)
        assert done.returncode != 0 and said in done.stderr, (name, done.stderr)
        assert "Traceback" not in done.stderr
