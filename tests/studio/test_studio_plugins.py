"""The submit page names the plugins that did not load and those only a restart updates."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect
from studio_support import sign_in_by_link

from runyard.tasks.registry import RESCAN_INTERVAL
from serverproc import start_server

pytestmark = pytest.mark.browser

WORKING = '''
from runyard import Task, TaskOutput


class Fine(Task):
    """A plugin that loads."""

    def run(self, inputs, run):
        return TaskOutput()
'''


def fake_dist(site: Path, module: str, code: str, task: str) -> Path:
    """What pip leaves for a plugin: its module and a dist-info naming the entry point."""
    (site / f"{module}.py").write_text(code)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[runyard.tasks]\n{task} = {module}:Fine\n")
    return site / f"{module}.py"


def test_submit_page_shows_plugin_errors_and_restart_notes(tmp_path: Path, page) -> None:
    site = tmp_path / "site"
    site.mkdir()
    fake_dist(site, "studio_broken", WORKING + "\nraise ImportError('no libfoo.so here')\n", "sb")
    fine = fake_dist(site, "studio_fine", WORKING, "sf")
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    server = start_server(tmp_path / "srv", env={"PYTHONPATH": path})
    try:
        later = time.time() + 5  # the module the server imported changes under it
        os.utime(fine, (later, later))
        time.sleep(RESCAN_INTERVAL + 0.1)
        sign_in_by_link(page, server)
        page.goto(server.url + "/#/submit?task=sf")
        problems = page.locator("#plugin-problems")
        expect(problems).to_contain_text("Plugins that did not load")
        expect(problems.locator(".plugin-error")).to_have_text("sb: ImportError: no libfoo.so here")
        expect(problems.locator(".plugin-restart")).to_contain_text("the code of task sf (")
        expect(problems.locator(".plugin-restart")).to_contain_text("restart the server")
        expect(page.locator("#definition")).to_have_value("sf")  # the form is still there
    finally:
        server.stop()
