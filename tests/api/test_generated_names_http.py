"""Unnamed submits through a real server: readable names, all different under parallel
submits, each usable as a short reference at once."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from serverproc import ServerProcess

SUBMITS = 40
READABLE = re.compile(r"^base#demo#demo-[a-z]+-[a-z]+-\d+$")


def test_parallel_submits_get_distinct_readable_names(server: ServerProcess) -> None:
    def submit(x: int) -> str:
        with server.client() as http:
            reply = http.post("/jobs/submit", json={"arguments": {"task": "demo", "x": x, "y": 1}})
        assert reply.status_code == 200 and reply.json()["success"], reply.text
        return str(reply.json()["answer"]["task_id"])

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(submit, range(SUBMITS)))
    assert len(set(ids)) == SUBMITS
    assert all(READABLE.fullmatch(task_id) for task_id in ids), ids
    name = ids[0].rsplit("#", 1)[1]
    found = server.call("status", task_id=name)  # the generated name alone finds it
    assert found["success"] and found["answer"]["task_id"] == ids[0]
