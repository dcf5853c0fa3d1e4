"""The Studio on the research pipeline example (installed into the venv): the final report
opened at once on its task page, rendered from Markdown (safely) with its PNG figures, a PNG preview, and the etl task's
Parquet file as a table read server-side — in a real Chromium against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import finish, screenshot, sign_in_by_link, submit, task_hash

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

HOSTILE_TITLE = 'Report <img src=x onerror="window.pwned=1"> <b>bold</b>'


def run(server: ServerProcess, task: str, **inputs: Any) -> str:
    status = finish(server, submit(server, task, **inputs))
    assert status["state"] == "succeeded", status
    return str(status["task_id"])


@pytest.fixture(scope="module")
def research(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of its own: the shared Studio server's task list is asserted elsewhere."""
    server = start_server(tmp_path_factory.mktemp("research-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pipeline(research: ServerProcess) -> dict[str, str]:
    studio = research
    etl = run(studio, "research_etl", dataset="diabetes")
    train = run(studio, "research_train", source_tasks=etl, cv_folds=2)
    backtest = run(studio, "research_backtest", source_tasks=train)
    report = run(studio, "research_report", source_tasks=backtest, title=HOSTILE_TITLE)
    return {"etl": etl, "report": report}


def loaded(page: Any, selector: str) -> list[dict[str, Any]]:
    """``{src, width}`` of every image matching ``selector`` once all have loaded."""
    page.wait_for_function(
        f"""() => {{
          const images = [...document.querySelectorAll({selector!r})];
          return images.length && images.every((img) => img.complete && img.naturalWidth > 0);
        }}"""
    )
    found: list[dict[str, Any]] = page.eval_on_selector_all(
        selector, "(images) => images.map((img) => ({src: img.src, width: img.naturalWidth}))"
    )
    return found


def test_the_report_renders_with_its_figures_and_no_html(
    page: Any, research: ServerProcess, pipeline: dict[str, str]
) -> None:
    sign_in_by_link(page, research)
    page.goto(research.url + "/" + task_hash(pipeline["report"]))
    files = page.locator("#artifact-files")
    # the report opens at once, beside its two figures, with no click
    expect(files.locator(".preview-title")).to_have_text("Preview: report")
    rendered = files.locator(".preview-markdown")
    expect(rendered.locator("h1")).to_have_text(HOSTILE_TITLE)
    assert rendered.locator("h1 img, h1 b, script").count() == 0
    tables = rendered.locator("table.md-table")
    expect(tables).to_have_count(2)  # the ranking, then the training runs' params compared
    table = tables.first
    expect(table.locator("thead th")).to_have_count(7)
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr td").nth(1)).to_have_text("1. ridge")
    images = loaded(page, "#artifact-files .preview-markdown img.md-image")
    assert len(images) == 2 and all(i["src"].startswith("blob:") for i in images), images
    assert all(i["width"] > 100 for i in images), images
    assert page.evaluate("window.pwned") is None
    screenshot(page, "research-report")
    files.get_by_role("button", name="Show source").click()
    expect(files.locator(".preview-text")).to_contain_text(
        "![Test R2 by run](figures/comparison.png)"
    )

    files.get_by_role("button", name="Preview comparison", exact=True).click()
    (image,) = loaded(page, "#artifact-files img.preview-image")
    assert image["src"].startswith("blob:") and image["width"] > 100


def test_the_etl_parquet_is_previewed_as_a_table(
    page: Any, research: ServerProcess, pipeline: dict[str, str]
) -> None:
    sign_in_by_link(page, research)
    page.goto(research.url + "/" + task_hash(pipeline["etl"]))
    files = page.locator("#artifact-files")
    files.get_by_role("button", name="Preview train", exact=True).click()
    table = files.locator(".parquet-preview table")
    expect(table.locator("thead th").first).to_have_text("age")
    expect(table.locator("thead th").last).to_have_text("target")
    expect(table.locator("tbody tr")).to_have_count(100)
    expect(files.locator(".parquet-preview")).to_contain_text("Showing 100 of 331 rows")
    screenshot(page, "research-etl-parquet")


def test_markdown_renders_no_html_scripts_or_unsafe_links(static_studio: str, page: Any) -> None:
    """Hostile Markdown: raw HTML, javascript: links, images from elsewhere or climbing out
    of the task folder. Only DOM built from text comes out; only sibling images are asked."""
    page.goto(static_studio + "/#/nowhere")
    page.wait_for_selector("h1")
    result = page.evaluate(
        """async () => {
          const { renderMarkdown } = await import('/js/markdown.js');
          const { siblingUrl } = await import('/js/views/files.js');
          const asked = [];
          const text = [
            '# Title <script>window.pwned = 1</script>',
            '<img src=x onerror="window.pwned = 2">',
            '[click](javascript:window.pwned=3) [ok](https://example.org/a)',
            '![far](https://evil.example/x.png) ![up](../../secret.png) ![fig](figures/a.png)',
            '| a | b |', '|---|--:|', '| <b>x</b> | 1 \\\\| 2 |',
            '```', '<script>alert(1)</script>', '```',
          ].join('\\n');
          const file = { path: 'report.md', url: '/api/v1/tasks/t%23x%23y/files/report.md' };
          const root = document.createElement('div');
          root.append(...renderMarkdown(text, { resolveImage: async (src) => {
            asked.push(siblingUrl(file, src));
            return null;
          } }));
          document.body.append(root);
          await new Promise((done) => setTimeout(done, 50));
          return {
            tags: [...root.querySelectorAll('*')].map((el) => el.tagName.toLowerCase()),
            links: [...root.querySelectorAll('a')].map((a) => a.getAttribute('href')),
            heading: root.querySelector('h1').textContent,
            cells: [...root.querySelectorAll('td')].map((td) => td.textContent),
            code: root.querySelector('pre code').textContent,
            asked, pwned: window.pwned ?? null,
          };
        }"""
    )
    assert result["pwned"] is None
    assert not {"script", "b", "iframe"} & set(result["tags"]), result["tags"]
    assert result["links"] == ["https://example.org/a"]
    assert result["heading"] == "Title <script>window.pwned = 1</script>"
    assert result["cells"] == ["<b>x</b>", "1 | 2"]
    assert result["code"] == "<script>alert(1)</script>"
    assert result["asked"] == [None, None, "/api/v1/tasks/t%23x%23y/files/figures/a.png"]
