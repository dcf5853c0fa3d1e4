"""Plugins pip installs next to a running server appear in ``runyard defs`` with no restart.

A real server runs under a venv of the test's own (see ``plugin_dist``); a real pip
installs a real distribution into it, as a wheel and editable (the editable one reaches
``sys.path`` only through the ``.pth`` file pip writes, which the interpreter read at its
start); the real CLI asks the server. A plugin that raises on import is named with its error;
an uninstalled or edited one is listed with the sentence that says a restart is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from plugin_dist import PluginProject, install, layered_venv, uninstall, write_project

from runyard.tasks.registry import RESCAN_INTERVAL
from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

GREETER = '''
from pathlib import Path

from runyard import Task, TaskInput, TaskOutput, TaskRun


class GreetInput(TaskInput):
    who: str = "world"


class GreetOutput(TaskOutput):
    greeting: str


class Greet(Task):
    """Greet someone from a plugin installed while the server ran."""

    Input = GreetInput
    Output = GreetOutput

    def run(self, inputs: GreetInput, run: TaskRun) -> GreetOutput:
        Path(run.task_dir, "greeting.txt").write_text(f"Hello, {inputs.who}!")
        return GreetOutput(greeting=f"Hello, {inputs.who}!")
'''

BROKEN = GREETER + '\nraise RuntimeError("the GPU driver is missing")\n'


@dataclass
class Site:
    python: Path
    server: ServerProcess
    tmp: Path
    last_defs: float = 0.0  # when the last ``runyard defs`` ended (its rescans were before)

    def project(self, task: str, code: str = GREETER) -> PluginProject:
        name = f"rylive-{uuid.uuid4().hex[:8]}"
        return write_project(self.tmp / name, name, {task: "Greet"}, code)

    def defs(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``runyard defs ARGS`` once the server may rescan again (one rescan a second)."""
        time.sleep(max(0.0, self.last_defs + RESCAN_INTERVAL + 0.1 - time.monotonic()))
        try:
            return subprocess.run(
                [sys.executable, "-m", "runyard", "defs", *args], cwd=self.server.root,
                env=self.server.cli_env(), capture_output=True, text=True, timeout=60,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            self.last_defs = time.monotonic()

    def defs_json(self) -> dict[str, object]:
        done = self.defs("--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """One venv and server for the module; each test installs plugins of its own names."""
    tmp_path = tmp_path_factory.mktemp("live")
    python = layered_venv(tmp_path / "venv")
    from agent_support import PACKAGES

    agents = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "none"}  # for a run token
    server = start_server(tmp_path / "srv", python=str(python), config=agents)
    try:
        yield Site(python, server, tmp_path)
    finally:
        server.stop()


def write_dist_info(site_packages: Path, project: PluginProject, task: str) -> None:
    """What an installer leaves for a second distribution reusing ``project``'s module."""
    info = site_packages / f"{task}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {task}\nVersion: 0.1\n")
    points = f"[runyard.tasks]\n{task} = {project.module}:Greet\n"
    (info / "entry_points.txt").write_text(points)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


def test_a_wheel_installed_while_the_server_runs_is_listed_run_and_its_removal_noted(
    site: Site,
) -> None:
    task = unique("greet")
    project = site.project(task)
    before = site.defs(task)
    assert before.returncode != 0 and f"Unknown Task: {task}" in before.stderr
    pid = site.server.proc.pid
    install(site.python, project)
    shown = site.defs(task)
    assert shown.returncode == 0, shown.stderr
    assert "Greet someone from a plugin installed while the server ran." in shown.stdout
    assert task in site.defs().stdout
    handle = site.server.call("submit", task=task, task_name="hi", who="pip")
    assert handle["success"] is True, handle
    answer = handle["answer"]
    final = site.server.call("wait_task", task_id=answer["task_id"], run_id=answer["run_id"])
    assert final["answer"]["state"] == "succeeded", final
    assert final["answer"]["result"]["greeting"] == "Hello, pip!"
    assert site.server.proc.pid == pid and site.server.proc.poll() is None
    uninstall(site.python, project)
    listing = site.defs()
    sentence = (
        f"plugin {project.name} was uninstalled after the server loaded task {task}; "
        "restart the server to drop it."
    )
    assert sentence in " ".join(listing.stdout.split())
    assert site.defs_json()["restart_required"][task] == sentence  # type: ignore[index]


def test_an_editable_install_is_found_through_its_new_pth_file(site: Site) -> None:
    task = unique("editable")
    project = site.project(task)
    assert site.defs(task).returncode != 0
    install(site.python, project, editable=True)
    pth = site.python.parents[1] / "lib"
    assert list(pth.glob(f"python*/site-packages/{project.module}.pth"))  # what pip wrote
    shown = site.defs(task)
    assert shown.returncode == 0, shown.stderr
    assert "Greet someone" in shown.stdout and "note:" not in shown.stderr
    # the worker, forked from a launcher that started before the install, imports it too
    handle = site.server.call("submit", task=task, task_name="e", who="editable")["answer"]
    final = site.server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["answer"]["state"] == "succeeded", final
    assert final["answer"]["result"]["greeting"] == "Hello, editable!"
    # the module the server imported is edited in place: only a restart brings it in
    project.module_file.write_text(GREETER.replace("Greet someone", "Greet anyone"))
    later = time.time() + 5
    os.utime(project.module_file, (later, later))
    edited = site.defs(task)
    assert edited.returncode == 0 and "Greet someone" in edited.stdout
    note = " ".join(edited.stderr.split())
    assert f"the code of task {task} (" in note
    assert "changed after the server imported it; restart the server (runyard serve)" in note
    assert task in site.defs_json()["restart_required"]  # type: ignore[operator]


def test_a_plugin_that_raises_on_import_is_named_with_its_error(site: Site) -> None:
    task = unique("broken")
    broken = site.project(task, BROKEN)
    install(site.python, broken)
    listing = site.defs()
    assert listing.returncode == 0, listing.stderr
    text = " ".join(listing.stdout.split())
    assert "Plugins that did not load:" in text
    assert f"{task}: RuntimeError: the GPU driver is missing" in text
    assert "demo" in text  # the others are still listed
    errors = site.defs_json()["plugin_errors"]
    assert errors[task] == "RuntimeError: the GPU driver is missing"  # type: ignore[index]
    one = site.defs(task)
    assert one.returncode != 0
    assert f"the plugin of task {task} did not load: RuntimeError: the GPU" in one.stderr
    # fixed and installed again: a module that never imported is tried again
    broken.module_file.write_text(GREETER)
    install(site.python, broken)
    fixed = site.defs_json()
    assert task not in fixed["plugin_errors"]  # type: ignore[operator]
    assert task in [d["name"] for d in fixed["definitions"]]  # type: ignore[attr-defined]


def test_the_rescan_route_finds_a_plugin_at_once_and_answers_only_the_admin(site: Site) -> None:
    from api_helpers import create_run, new_session, wait_file, wait_run

    server = site.server
    with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers) as admin:
        first = admin.post("/plugins/rescan")
        assert first.status_code == 200, first.text
        task = unique("route")
        project = site.project(task)
        install(site.python, project)
        found = admin.post("/plugins/rescan")
        assert found.status_code == 200 and found.json()["added"] == [task], found.text
        # at once: a forced rescan does not wait for the one-a-second limit
        second = unique("at_once")
        site_packages = next((site.python.parents[1] / "lib").glob("python*/site-packages"))
        write_dist_info(site_packages, project, second)
        again = admin.post("/plugins/rescan")
        assert again.json()["added"] == [second], again.text
        assert task in admin.get("/plugins").json()["tasks"]
        assert admin.post("/plugins/rescan").json()["added"] == []
        stranger = httpx.post(server.url + "/api/v1/plugins/rescan", timeout=30)
        assert stranger.status_code == 401
        session_id = new_session(admin)
        run = create_run(admin, session_id, "token\nwait-for go\nanswer done", package="probe")
        run_token = wait_file(admin, run["id"], "token").decode()
        try:
            as_run = {"authorization": f"Bearer {run_token}"}
            refused = httpx.post(server.url + "/api/v1/plugins/rescan", headers=as_run, timeout=30)
            assert refused.status_code == 403, refused.text
            assert "admin" in refused.json()["error"]["message"]
        finally:
            (server.workspace / "agent" / "session-state" / session_id / "go").touch()
            assert wait_run(admin, run["id"])["state"] == "succeeded"
