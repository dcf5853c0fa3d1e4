"""Fixtures for the Studio's end-to-end tests: a real server, a real headless Chromium.

The browser is Debian's ``chromium`` driven by Playwright's Python package (no browser
download). One server serves the whole module set; each test gets a fresh browser context
and fails on any page error or Content-Security-Policy violation it caused.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from studio_support import CHROMIUM, CHROMIUM_ARGS, SEEDED_PAGES, SHOTS, sign_in_by_link

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    # per module, not per session: while Playwright's sync API runs, its event loop counts as
    # running in this thread, and a later test's asyncio.run() (the async client's tests)
    # would be refused; with parallel workers any file can follow a Studio file
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    # launch() starts Chromium on a fresh temporary profile of its own
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def seed_paging_tasks(workspace: Path, count: int = SEEDED_PAGES) -> list[str]:
    """Write finished etl task records directly, as an existing workspace would hold them."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    ws.ensure()
    ids = []
    for n in range(count):
        task_id = f"etl#seeded#page-{n:03d}"
        folder = ws.task_dir(task_id)
        folder.mkdir(parents=True)
        stamp = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.000000Z"
        write_json_atomic(
            folder / "status.json",
            {
                "task_id": task_id,
                "run_id": f"{n:032x}",
                "task_type": "etl",
                "task_name": "seeded",
                "state": "succeeded",
                "config": {"task_name": f"page-{n:03d}", "source_tasks": ""},
                "created_at": stamp,
                "started_at": stamp,
                "finished_at": stamp,
                "pid": None,
                "exit_code": 0,
                "error": "",
                "result": {},
                "steps": [],
                "log_path": "",
            },  # fmt: skip
            fsync=False,
        )
        ids.append(task_id)
    return ids


@pytest.fixture(scope="session")
def static_studio() -> Iterator[str]:
    """Only the Studio's files (same headers as the server), for testing its modules alone."""
    import socket
    import threading
    import time

    import uvicorn
    from starlette.applications import Starlette

    from runyard.api.studio import mount_studio

    app = Starlette()
    mount_studio(app)  # type: ignore[arg-type]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


@pytest.fixture(scope="session")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server for the Studio tests, its workspace seeded with paging tasks."""
    root = tmp_path_factory.mktemp("studio-server")
    seed_paging_tasks(root / "ws")
    server = start_server(root, config={"max_concurrent_tasks": 8})
    try:
        yield server
    finally:
        server.stop()


class PageProblems:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def console(self, message: Any) -> None:
        text = message.text
        if message.type == "error" and "Content Security Policy" in text:
            self.errors.append(f"CSP: {text}")

    def page_error(self, error: Any) -> None:
        self.errors.append(f"page error: {error}")


@pytest.fixture
def page(chromium: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A page in a fresh context (1280 x 900); fails the test on page errors or CSP reports.

    Tests of the shared ``studio`` server get a page signed in by the link ``serve`` prints.
    """
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    problems = PageProblems()
    page.on("console", problems.console)
    page.on("pageerror", problems.page_error)
    if "studio" in request.fixturenames:
        sign_in_by_link(page, request.getfixturevalue("studio"))
    try:
        yield page
    finally:
        context.close()
    assert not problems.errors, "\n".join(problems.errors)


@pytest.fixture(scope="session", autouse=True)
def _clean_shots() -> None:
    if SHOTS.exists():
        shutil.rmtree(SHOTS)
    SHOTS.mkdir(parents=True, exist_ok=True)
