"""The Studio links commands print (``runyard pipeline run``, ``runyard example research``):
with the server token at hand they are one-time login links to the page they name, so the
link opens that page signed in; without it they are the plain page address."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import expect
from studio_support import console_errors, submit

from runyard.cli import studiolinks
from runyard.client import Client
from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

ONE_STEP = """
from runyard import Pipeline

pipe = Pipeline("linked")
pipe.task("demo", key="only", x=1, y=2)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("page-links"), token="links-secret")
    try:
        yield srv
    finally:
        srv.stop()


def fresh_page(chromium: Any) -> tuple[Any, Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    return context, context.new_page()


def test_a_printed_pipeline_link_opens_its_page_signed_in(
    server: ServerProcess, chromium: Any, tmp_path: Path
) -> None:
    (tmp_path / "flow.py").write_text(ONE_STEP)
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "pipeline", "run", "flow.py", "--wait"],
        cwd=tmp_path, env=server.cli_env(), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"Studio: (\S+)", done.stdout)
    assert found, done.stdout
    link = found.group(1)
    run_id = re.search(r"#login=[^&\s]+&to=/pipelines/(\S+)$", link)
    assert run_id, link
    assert server.token and server.token not in done.stdout
    context, page = fresh_page(chromium)
    try:
        errors = console_errors(page)
        page.goto(link)
        expect(page.locator("#forget-token")).to_be_visible()  # signed in
        expect(page.locator("#token-dialog")).to_be_hidden()
        expect(page.locator("main")).to_contain_text("only")  # the run's step, its page
        assert page.url == f"{server.url}/#/pipelines/{run_id.group(1)}"  # no code left
        assert errors == []
    finally:
        context.close()


def test_a_task_link_leads_to_the_task_and_works_once(server: ServerProcess, chromium: Any):
    handle = submit(server, "demo", x=2, y=3, task_name="linked-task")
    with Client(server.url, token=server.token) as client:
        link = studiolinks.page_link(
            server.url, studiolinks.route("tasks", handle["task_id"]), client
        )
    assert "#login=" in link and link.endswith("&to=/tasks/" + quote(handle["task_id"], safe=""))
    context, page = fresh_page(chromium)
    try:
        page.goto(link)
        expect(page.locator("#forget-token")).to_be_visible()
        expect(page.locator("main")).to_contain_text("linked-task")
        assert page.url.endswith("#/tasks/" + quote(handle["task_id"], safe=""))
    finally:
        context.close()
    context, page = fresh_page(chromium)  # a second tab: the code was spent
    try:
        page.goto(link)
        expect(page.locator("#login-failed")).to_be_visible()
    finally:
        context.close()


@pytest.mark.parametrize("to", ["//evil.example/x", "javascript:alert(1)", "https:/x"])
def test_a_link_leads_only_to_a_page_of_the_studio(
    server: ServerProcess, chromium: Any, to: str
) -> None:
    with Client(server.url, token=server.token) as client:
        code = client.login_code()["code"]
    context, page = fresh_page(chromium)
    try:
        page.goto(f"{server.url}/#login={code}&to={quote(to, safe='/:')}")
        expect(page.locator("#forget-token")).to_be_visible()  # signed in, and left home
        assert page.url == f"{server.url}/"
    finally:
        context.close()


def test_without_the_server_token_the_link_is_the_plain_address(server: ServerProcess) -> None:
    page = studiolinks.route("tasks", "base#demo#x")
    with Client(server.url, token="not-the-token") as client:
        assert studiolinks.page_link(server.url, page, client) == (
            f"{server.url}/#/tasks/base%23demo%23x"
        )
    assert studiolinks.page_link(server.url + "/", page) == f"{server.url}/#/tasks/base%23demo%23x"
