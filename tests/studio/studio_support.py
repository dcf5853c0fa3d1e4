"""Helpers shared by the Studio tests (imported by name, not via conftest)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx

from serverproc import ServerProcess

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "studio"
SEEDED_PAGES = 120  # etl tasks written straight into the workspace, for paging
CHROMIUM = os.environ.get("RUNYARD_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def screenshot(page: Any, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot as a test artefact under test-artifacts/studio/."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{re.sub(r'[^A-Za-z0-9_-]', '_', name)}.png"
    if full_page:  # a sticky header would otherwise be drawn where the page was scrolled to
        page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path), full_page=full_page)
    return path


def submit(server: ServerProcess, task: str, **inputs: Any) -> dict[str, Any]:
    reply = server.call("submit", task=task, **inputs)
    assert reply["success"], reply
    return reply["answer"]


def finish(server: ServerProcess, handle: dict[str, Any]) -> dict[str, Any]:
    reply = server.call(
        "wait_task", task_id=handle["task_id"], run_id=handle["run_id"], poll_interval=0.05
    )
    return reply["answer"]


def task_hash(task_id: str) -> str:
    return "#/tasks/" + task_id.replace("#", "%23")


def login_link(server: ServerProcess) -> str:
    """A fresh one-time login link of ``server``, minted as ``runyard studio`` mints it."""
    reply = httpx.post(server.url + "/api/v1/login/codes", headers=server.headers, json={})
    assert reply.status_code == 200, reply.text
    return f"{server.url}/#login={reply.json()['code']}"


def sign_in_by_link(page: Any, server: ServerProcess) -> None:
    """Open the Studio by a login link (``/#login=...``), then leave it: the session token it
    was traded for stays in this tab's sessionStorage and the next ``goto`` loads a fresh
    page."""
    page.goto(login_link(server))
    page.wait_for_selector("#forget-token:not([hidden])")  # shown once the tab holds a token
    page.goto("about:blank")


def console_errors(page: Any) -> list[str]:
    """A list that fills with every console error the page logs from now on (the ``page``
    fixture fails on page errors and policy reports only)."""
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    return errors
