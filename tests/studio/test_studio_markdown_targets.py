"""A task's Markdown file rendered in the Studio makes no request outside that task's files:
image targets climbing out by ``..`` (plain, percent-encoded, mixed, backslashes), absolute
paths and remote URLs are shown as text and never fetched with the Studio's token, while a
sibling image, or one reached by ``..`` inside the task folder, still loads. In a real
Chromium against a real server; every request the page makes is recorded."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from playwright.sync_api import expect
from studio_support import finish, sign_in_by_link, submit, task_hash

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

# each of these must stay text: none may produce a request
HOSTILE_IMAGES = [
    "%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/api/v1/sessions?.png",
    "%2E%2E%2F%2E%2E%2F%2E%2E%2F%2E%2E%2F%2E%2E%2Fapi%2Fv1%2Fsessions.png",
    ".%2e/.%2e/.%2e/.%2e/.%2e/api/v1/sessions.png",
    "../../api/v1/sessions.png",
    "sub/../../../../../../api/v1/tasks.png",
    "..\\..\\..\\..\\..\\api\\v1\\sessions.png",
    "/api/v1/sessions.png",
    "/jobs/list_task_statuses.png",
    "//evil.example/x.png",
    "http://evil.example/x.png",
    "https://evil.example/x.png",
    "%68ttp://evil.example/x.png",
]


def png_bytes(width: int = 24, height: int = 12) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes((200, 80, 40)) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join((b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", header),
                     chunk(b"IDAT", zlib.compress(rows)), chunk(b"IEND", b"")))  # fmt: skip


def report(*good: str) -> str:
    lines = ["# Report", *(f"![ok {n}]({src})" for n, src in enumerate(good))]
    lines += [f"![bad {n}]({src})" for n, src in enumerate(HOSTILE_IMAGES)]
    lines += ["[up](../../api/v1/sessions) [enc](%2e%2e/%2e%2e/api/v1/sessions)"]
    return "\n\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("markdown-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def task(server: ServerProcess) -> str:
    """A failed task (the Studio lists the files it left) whose folder holds two reports,
    one in a subfolder, and the image both may show."""
    status = finish(server, submit(server, "command", command="exit 3", shell=True,
                                   task_name="markdown"))  # fmt: skip
    assert status["state"] == "failed", status
    folder: Path = server.workspace / "base" / status["task_id"]
    (folder / "sub").mkdir()
    (folder / "plot.png").write_bytes(png_bytes())
    (folder / "report.md").write_text(report("plot.png", "./sub/../plot.png"))
    (folder / "sub" / "notes.md").write_text(report("../plot.png", "%2e%2e/plot.png"))
    return str(status["task_id"])


def fetched(requests: list[str], server: ServerProcess) -> list[str]:
    """The requests that left the page: its own object URLs (``blob:``, the images it
    fetched, shown) are not."""
    return [url for url in requests if not url.startswith(f"blob:{server.url}/")]


def outside(requests: list[str], server: ServerProcess, task_id: str) -> list[str]:
    files = f"/api/v1/tasks/{quote(task_id, safe='')}/files/"
    return [url for url in fetched(requests, server)
            if not (url.startswith(server.url + "/") and urlsplit(url).path.startswith(files))]  # fmt: skip


@pytest.mark.parametrize("name", ["report.md", "sub/notes.md"])
def test_markdown_images_reach_only_the_tasks_files(
    page: Any, server: ServerProcess, task: str, name: str
) -> None:
    sign_in_by_link(page, server)
    page.goto(server.url + "/" + task_hash(task))
    files = page.locator("#artifact-files")
    expect(files.locator(f"tr[data-file='{name}']")).to_be_visible()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    files.get_by_role("button", name=f"Preview {name}", exact=True).click()
    rendered = files.locator(".preview-markdown")
    expect(rendered.locator("h1")).to_have_text("Report")
    page.wait_for_function(
        """() => {
          const images = [...document.querySelectorAll('.preview-markdown img[alt^="ok"]')];
          return images.length === 2 && images.every((img) => img.complete && img.naturalWidth === 24);
        }"""
    )
    page.wait_for_timeout(300)  # a late fetch of a hostile target would show here
    assert outside(requests, server, task) == [], requests
    for n in range(len(HOSTILE_IMAGES)):
        expect(rendered).to_contain_text(f"[image not shown: bad {n}]")
    expect(rendered.locator(".md-link")).to_have_count(2)
    assert rendered.locator("a").count() == 0
    files = f"{server.url}/api/v1/tasks/{quote(task, safe='')}/files/"
    assert set(fetched(requests, server)) == {files + quote(name), files + "plot.png"}, requests


def test_sibling_urls_stay_in_their_task_or_run(static_studio: str, page: Any) -> None:
    """The resolution alone, for task files and run outputs: percent-decoding comes before
    ``.``/``..`` are resolved, and nothing resolves above the file's own task or run."""
    page.goto(static_studio + "/#/nowhere")
    page.wait_for_selector("h1")
    found = page.evaluate(
        """async (hostile) => {
          const { siblingUrl } = await import('/js/views/files.js');
          const task = { path: 'out/report.md', url: '/api/v1/tasks/t%23x%23y/files/out/report.md' };
          const run = { path: 'out/r.md', url: '/api/v1/runs/run_1/files/out/r.md' };
          const other = { path: 'r.md', url: '/api/v1/artifacts/a1/content' };
          const forged = { path: 'r.md', url: '/api/v1/tasks/../files/r.md' };
          const all = (file) => hostile.map((src) => siblingUrl(file, src));
          return {
            task: all(task), run: all(run),
            good: [siblingUrl(task, 'a.png'), siblingUrl(task, '../b%20c.png'),
                   siblingUrl(run, '%2e%2e/in/x.png'), siblingUrl(task, 'd/./e.png?v=1#top'),
                   siblingUrl(task, '%252e%252e/f.png')],
            other: [siblingUrl(other, 'a.png'), siblingUrl(forged, 'a.png'),
                    siblingUrl(task, '../../x.png'), siblingUrl(task, '%zz.png')],
          };
        }""",
        HOSTILE_IMAGES,
    )
    assert found["task"] == [None] * len(HOSTILE_IMAGES), found["task"]
    assert found["run"] == [None] * len(HOSTILE_IMAGES), found["run"]
    assert found["good"] == [
        "/api/v1/tasks/t%23x%23y/files/out/a.png",
        "/api/v1/tasks/t%23x%23y/files/b%20c.png",
        "/api/v1/runs/run_1/files/in/x.png",
        "/api/v1/tasks/t%23x%23y/files/out/d/e.png",
        "/api/v1/tasks/t%23x%23y/files/out/%252e%252e/f.png",
    ]
    assert found["other"] == [None, None, None, None]
