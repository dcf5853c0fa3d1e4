"""A run token reads the metrics of its own session's tasks and compares them, and learns
nothing of any other task: its metrics, a compare naming it (alone or beside the
session's own), and a task list sorted or filtered by tracked keys answer as if it did not
exist. Driven from inside a real sandboxed agent run, as an attacker in one would try."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_run  # noqa: E402

LOG = "{}/bin/python -c \"import json,os;f=open(os.environ['RUNYARD_METRICS_FILE'],'a');" \
    "f.write(json.dumps({{'name':'score','value':{},'step':0}})+chr(10))\""  # fmt: skip


def metrics_path(task_id: str) -> str:
    return f"/api/v1/tasks/{quote(task_id, safe='')}/metrics"


def compare_path(*refs: str) -> str:
    return "/api/v1/compare?" + urlencode([("id", ref) for ref in refs])


def job(label: str, name: str, **arguments: object) -> list[object]:
    return [label, "POST", f"/jobs/{name}", {"arguments": arguments}]


@pytest.mark.sandbox
@needs_bwrap
def test_a_run_token_reads_and_compares_only_its_own_sessions_runs(tmp_path: Path) -> None:
    server = agent_server(tmp_path / "srv", "bwrap")
    try:
        prefix = sys.prefix
        hidden = LOG.format(prefix, 0.99)
        secret = server.call("submit", task="command", task_name="secret", command=hidden)
        secret = secret["answer"]
        server.call("wait_task", task_id=secret["task_id"], run_id=secret["run_id"])
        own, other, missing = "base#command#own", secret["task_id"], "base#command#no-such"
        mine, by_command = (
            [LOG.format(prefix, 0.5), LOG.format(prefix, 0.7)],
            f"params.command={hidden}",
        )
        calls = [
            job("submit", "submit", task="command", task_name="own", command=mine[0]),
            job("wait", "stream_task", task_id=own),
            job("submit2", "submit", task="command", task_name="own2", command=mine[1]),
            job("wait2", "stream_task", task_id="base#command#own2"),
            ["own", "GET", metrics_path(own), None],
            ["other", "GET", metrics_path(other), None],
            ["by_name", "GET", metrics_path("secret"), None],
            ["none", "GET", metrics_path(missing), None],
            ["pair", "GET", compare_path(own, "own2"), None],
            ["mixed", "GET", compare_path(own, other), None],
            ["mixed_name", "GET", compare_path(own, "secret"), None],
            ["mixed_none", "GET", compare_path(own, missing), None],
            ["sorted", "GET", "/api/v1/tasks?sort=metrics.score:desc", None],
            ["filtered", "GET", "/api/v1/tasks?" + urlencode({"filter": by_command}), None],
        ]
        with api(server, timeout=120) as client:
            run = create_run(client, new_session(client), json.dumps(calls), package="scope_probe")
            done = wait_run(client, run["id"], timeout=90)
            assert done["state"] == "succeeded", done
            replies = client.get(f"/runs/{run['id']}/files/replies.json").json()
        assert replies["own"]["status"] == 200, replies["own"]
        assert replies["own"]["body"]["runs"][0]["metrics"]["score"]["values"] == [0.5]
        pair = replies["pair"]
        assert pair["status"] == 200, pair
        assert [row["values"] for row in pair["body"]["metrics"]] == [
            [{"last": 0.5, "min": 0.5, "max": 0.5, "step": 0, "count": 1},
             {"last": 0.7, "min": 0.7, "max": 0.7, "step": 0, "count": 1}],
        ]  # fmt: skip
        for label in ("other", "by_name", "mixed", "mixed_name"):
            assert replies[label]["status"] == 404, (label, replies[label])
            assert "0.99" not in json.dumps(replies[label]["body"])
        # another session's task answers exactly as one that does not exist
        none, other_reply = replies["none"]["body"], replies["other"]["body"]
        assert other_reply == json.loads(json.dumps(none).replace(missing, other))
        mixed, mixed_none = replies["mixed"]["body"], replies["mixed_none"]["body"]
        assert mixed == json.loads(json.dumps(mixed_none).replace(missing, other))
        sorted_ids = [t["task_id"] for t in replies["sorted"]["body"]["items"]]
        assert sorted_ids == ["base#command#own2", own]
        filtered = replies["filtered"]
        assert filtered["status"] == 200 and filtered["body"]["items"] == [], filtered
        assert filtered["body"]["total"] == 0
        with server.client() as admin:  # the server token sees and compares both sessions
            both = admin.get(compare_path(own, other))
            assert both.status_code == 200, both.text
            assert [i["task_id"] for i in both.json()["items"]] == [own, other]
            found = admin.get("/api/v1/tasks", params={"filter": by_command})
            assert [t["task_id"] for t in found.json()["items"]] == [other]
    finally:
        server.stop()
