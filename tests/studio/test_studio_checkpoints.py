"""Session checkpoints in the Studio: a checkpoint per run with Fork and Restore, each asking
for confirmation, the restore's system note, and a fork that says where it came from."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from serverproc import ServerProcess

pytestmark = pytest.mark.browser


def _finished_run(client: Any, session_id: str, prompt: str) -> dict[str, Any]:
    reply = client.post("/api/v1/runs", json={"sessionId": session_id, "userPrompt": prompt})
    assert reply.status_code == 201, reply.text
    run_id = reply.json()["id"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        run = client.get(f"/api/v1/runs/{run_id}").json()
        if run["state"] in ("succeeded", "failed", "cancelled"):
            return run  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end")


def test_fork_and_restore_from_the_session_view(studio: ServerProcess, page: Any) -> None:
    with studio.client(timeout=60) as client:
        session_id = client.post("/api/v1/sessions", json={"title": "branching"}).json()["id"]
        first = _finished_run(client, session_id, "first")
        _finished_run(client, session_id, "second")
    assert first["checkpoint"]["state"] == "present", first
    page.goto(f"{studio.url}/#/sessions/{session_id}")
    page.locator(f"#runs-table tr[data-run-id='{first['id']}']").click()
    checkpoint = page.locator("#run-checkpoint")
    expect(checkpoint).to_contain_text("State after this run")
    expect(page.locator("#forked-from")).to_be_hidden()

    page.click("#checkpoint-restore")
    page.click("#confirm-cancel")  # asked first; cancelling changes nothing
    expect(page.locator("#chat .msg-system")).to_have_count(0)
    page.click("#checkpoint-restore")
    page.click("#confirm-ok")
    expect(page.locator("#chat .msg-system")).to_contain_text(first["id"])

    page.click("#checkpoint-fork")
    page.click("#confirm-ok")
    expect(page).not_to_have_url(re.compile(re.escape(session_id)))
    origin = page.locator("#forked-from")
    expect(origin).to_contain_text(session_id)
    expect(origin).to_contain_text(first["id"])
    expect(page.locator("#chat .msg-user")).to_have_count(1)
    with studio.client() as client:
        history = client.get(f"/api/v1/sessions/{session_id}").json()["history"]
    assert [turn["role"] for turn in history].count("system") == 1  # the cancelled one did not
