"""``runyard metrics`` and ``runyard compare`` with no server: tasks run by ``runyard run``
log through ``$RUNYARD_METRICS_FILE``, and the commands read the workspace's files into the
answers the API gives (``--json``) and into tables; bad input exits non-zero, clearly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_proc import CLI, base_env

LOG = (
    "import json, os, sys\n"
    "scale = float(sys.argv[1])\n"
    "with open(os.environ['RUNYARD_METRICS_FILE'], 'a') as out:\n"
    "    for step in range(200):\n"
    "        out.write(json.dumps({'name': 'loss', 'value': scale / (step + 1), 'step': step}))\n"
    "        out.write('\\n')\n"
)


def local(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--workspace-dir", str(tmp_path / "ws"), "--log-dir", str(tmp_path / "logs")]
    return subprocess.run(
        [*CLI, *args, *where], cwd=tmp_path, env=base_env(), capture_output=True, text=True,
        timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def run_logging(tmp_path: Path, name: str, scale: float) -> str:
    command = f"{sys.executable} {tmp_path / 'log.py'} {scale}"
    done = local(tmp_path, "run", "command", f"command={json.dumps(command)}", "--name", name,
                 "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return str(json.loads(done.stdout)["run_id"])


def test_metrics_and_compare_from_the_files(tmp_path: Path) -> None:
    (tmp_path / "log.py").write_text(LOG)
    first = run_logging(tmp_path, "fit", 1.0)
    second = run_logging(tmp_path, "fit", 2.0)
    run_logging(tmp_path, "other", 3.0)
    done = local(tmp_path, "metrics", "fit", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert [(r["run_id"], r["current"]) for r in answer["runs"]] == [(second, True), (first, False)]
    for run, scale in zip(answer["runs"], (2.0, 1.0), strict=True):
        loss = run["metrics"]["loss"]
        assert loss["steps"] == list(range(200))
        assert loss["values"] == [scale / (s + 1) for s in range(200)]
    thinned = json.loads(local(tmp_path, "metrics", "fit", "--max-points", "10", "--json").stdout)
    assert all(len(r["metrics"]["loss"]["steps"]) <= 10 for r in thinned["runs"])
    table = local(tmp_path, "metrics", "fit", "--run", first)
    assert table.returncode == 0, table.stderr
    assert first in table.stdout and second not in table.stdout and "0..199" in table.stdout
    compared = local(tmp_path, "compare", "fit", f"fit@{first}", "other", "--json")
    assert compared.returncode == 0, compared.stderr
    body = json.loads(compared.stdout)
    assert [i["run_id"] for i in body["items"]][:2] == [second, first]
    assert body["params"][0] == {
        "name": "command", "differs": True, "values": [i["params"]["command"] for i in body["items"]]
    }  # fmt: skip
    lasts = [summary["last"] for summary in body["metrics"][0]["values"]]
    assert lasts == [2.0 / 200, 1.0 / 200, 3.0 / 200]
    side = local(tmp_path, "compare", "fit", "other")
    assert side.returncode == 0 and "≠" in side.stdout and "command" in side.stdout
    for args, words in (
        (("compare", "fit"), "2 to 20"),
        (("compare", "fit", "fit@nope/x"), "run id"),
        (("metrics", "fit", "--run", "f" * 32), "No run"),
        (("metrics", "nothing-here"), "nothing-here"),
    ):
        refused = local(tmp_path, *args)
        assert refused.returncode != 0 and words in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stderr
