"""A real Chromium on a page of another origin attacks the server: CSRF by no-cors fetch
and auto-submitted text/plain forms, a bodyless POST (which needs no content type), and
DNS rebinding (a name of the attacker's that
resolves to 127.0.0.1). Nothing gets created, with a token and with ``--no-auth`` alike
(there only the Origin, Host and content-type checks stand in the way)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from studio_support import CHROMIUM, CHROMIUM_ARGS

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

REBOUND = "rebound.test"  # the attacker's name; this browser resolves it to 127.0.0.1

ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>cat pictures</title>
<iframe name="sink-task"></iframe><iframe name="sink-session"></iframe>
<form id="f-task" method="post" enctype="text/plain" target="sink-task" action="TARGET/jobs/submit">
<input name='{"arguments":{"task":"command","task_name":"pwned-form","command":"id #' value='"}}'>
</form>
<form id="f-session" method="post" enctype="text/plain" target="sink-session"
 action="TARGET/api/v1/sessions"><input name='{"title":"pwned-form' value='"}'></form>
<script>
const target = "TARGET";
const job = (name) => JSON.stringify(
  {arguments: {task: "command", task_name: name, command: "id > /dev/null"}});
const loaded = (name) => new Promise((resolve) =>
  document.querySelector(`iframe[name=${name}]`).addEventListener("load", resolve, {once: true}));
const attempts = [
  fetch(target + "/jobs/submit", {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "text/plain"}, body: job("pwned-plain")}),
  fetch(target + "/jobs/submit", {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: job("pwned-form-url")}),
  fetch(target + "/jobs/submit", {method: "POST", mode: "no-cors", body: job("pwned-bare")}),
  fetch(target + "/api/v1/sessions", {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "text/plain"}, body: JSON.stringify({title: "pwned-fetch"})}),
  fetch(target + "/api/v1/sessions/SESSION/close", {method: "POST", mode: "no-cors"}),
  loaded("sink-task"), loaded("sink-session"),
];
document.getElementById("f-task").submit();
document.getElementById("f-session").submit();
Promise.allSettled(attempts).then(() => { window.attackDone = true; });
</script>
"""


class _AttackerSite(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module", params=["token", "no-auth"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("target"), auth=request.param == "token")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def attacker_site(target: ServerProcess) -> Iterator[str]:
    """Another origin: a second HTTP server on 127.0.0.1, another port."""
    with target.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "victim"}).json()["id"]
    page = ATTACK_PAGE.replace("TARGET", target.url).replace("SESSION", session_id).encode()
    handler = type("AttackerSite", (_AttackerSite,), {"page": page})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def rebinding_browser(chromium: Any) -> Iterator[Any]:
    """Chromium whose resolver answers 127.0.0.1 for the attacker's name."""
    args = [*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"]
    browser = chromium.browser_type.launch(executable_path=CHROMIUM, args=args)
    try:
        yield browser
    finally:
        browser.close()


def created(server: ServerProcess) -> tuple[list[str], list[str]]:
    """Task ids and session titles that an attack would have made (asked with the token)."""
    tasks = [t for t in server.call("list_task_ids")["answer"] if "pwned" in t]
    base = server.workspace / "base"
    folders = [p.name for p in base.iterdir() if "pwned" in p.name] if base.exists() else []
    with server.client() as client:
        sessions = client.get("/api/v1/sessions", params={"limit": 1000}).json()["items"]
    titles = [s["title"] for s in sessions if "pwned" in (s["title"] or "")]
    return tasks + folders, titles


def test_a_page_of_another_origin_creates_nothing(
    target: ServerProcess, attacker_site: str, page: Any
) -> None:
    answers: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda r: answers.append((r.url, r.status)) if r.url.startswith(target.url) else None,
    )
    page.goto(attacker_site)
    page.wait_for_function("window.attackDone === true")
    page.wait_for_timeout(300)  # let any answer still on its way arrive
    posted = {url.removeprefix(target.url) for url, _ in answers}
    closing = {p for p in posted if p.endswith("/close")}
    assert posted - closing == {"/jobs/submit", "/api/v1/sessions"}, answers  # all were sent
    assert len(closing) == 1, answers
    assert created(target) == ([], [])
    with target.client() as client:
        sessions = client.get("/api/v1/sessions", params={"limit": 1000}).json()["items"]
    assert {s["status"] for s in sessions if s["title"] == "victim"} == {"OPEN"}
    assert {status for _, status in answers} <= {403, 415}, answers


def test_a_rebound_name_reaches_nothing(target: ServerProcess, rebinding_browser: Any) -> None:
    """After rebinding, the attacker's page is same-origin with the server under its own
    name: its Origin matches its Host, JSON needs no preflight, only the Host check is left."""
    port = target.url.rsplit(":", 1)[1]
    context = rebinding_browser.new_context()
    try:
        page = context.new_page()
        landing = page.goto(f"http://{REBOUND}:{port}/")
        assert landing is not None and landing.status == 403
        statuses = page.evaluate(
            """async () => {
              const json = {"Content-Type": "application/json"};
              const body = JSON.stringify({arguments: {task: "command",
                task_name: "pwned-rebound", command: "id > /dev/null"}});
              const submit = await fetch("/jobs/submit", {method: "POST", headers: json, body});
              const session = await fetch("/api/v1/sessions",
                {method: "POST", headers: json, body: JSON.stringify({title: "pwned-rebound"})});
              const read = await fetch("/jobs/list_task_ids",
                {method: "POST", headers: json, body: "{}"});
              return [submit.status, session.status, read.status];
            }"""
        )
    finally:
        context.close()
    assert statuses == [403, 403, 403]
    assert created(target) == ([], [])
