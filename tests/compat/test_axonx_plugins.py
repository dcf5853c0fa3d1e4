"""AxonX 0.2.2's plugin jobs, called by the real AxonX CLI against a real server.

The server runs under a venv of the module's own layered on the test venv
(``plugin_dist.layered_venv``), so the pip ``install_plugin`` runs writes there and never
into the test venv. A tiny plugin wheel is built in tmp_path, copied into the workspace,
installed by ``axonx install_plugin``, listed, inspected, submitted and run with no restart,
then uninstalled. Every answer validates against AxonX's own models (``PluginInfo``,
``PluginInstallResult``, ``PluginUninstallResult``) in the AxonX venv. Attacks: a wheel
whose bytes differ from its sha256, a path out of the workspace or through a symlink, an
option passed as a requirement, uninstalling runyard itself; the setting off; a run token.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from axonx_models import validates
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "tasks"))
sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from plugin_dist import PluginProject, layered_venv, write_project  # noqa: E402

GREETER = '''
from pathlib import Path

from runyard import Task, TaskInput, TaskOutput, TaskRun


class GreetInput(TaskInput):
    who: str = "world"


class GreetOutput(TaskOutput):
    greeting: str


class Greet(Task):
    """Greet someone from a plugin install_plugin installed."""

    Input = GreetInput
    Output = GreetOutput

    def run(self, inputs: GreetInput, run: TaskRun) -> GreetOutput:
        return GreetOutput(greeting=f"Hello, {inputs.who}!")
'''

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)


@dataclass
class Site:
    python: Path
    server: ServerProcess
    tmp: Path

    def wheel(self, task: str | None, axonx_plugin: bool = False) -> tuple[PluginProject, Path]:
        """A plugin registering ``task`` (None: no task), built as a wheel in tmp_path;
        ``axonx_plugin``: also an AxonX plugin (its ``axonx.plugins`` entry point and
        ``plugin.yaml``), which ``axonx plugin install`` takes."""
        name = f"ryaxp-{uuid.uuid4().hex[:8]}"
        tasks = {task: "Greet"} if task else {}
        project = write_project(self.tmp / name, name, tasks, GREETER)
        if axonx_plugin and task:
            axonx_entry_points(project, task)
        out = self.tmp / f"{name}-dist"
        done = subprocess.run(
            [str(self.python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "--quiet", "-w", str(out), str(project.root)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return project, next(out.glob("*.whl"))

    def stage(self, wheel: Path) -> tuple[str, str]:
        """The wheel copied into the workspace: its workspace-relative path and sha256."""
        shutil.copy(wheel, self.server.workspace / wheel.name)
        return wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest()

    def installed(self, distribution: str) -> bool:
        probe = "import sys, importlib.metadata as m; m.distribution(sys.argv[1])"
        done = subprocess.run([str(self.python), "-c", probe, distribution], capture_output=True)
        return done.returncode == 0


def axonx_entry_points(project: PluginProject, task: str) -> None:
    """Make ``project`` an AxonX plugin too: the package named by ``axonx.plugins`` with
    a ``plugin.yaml`` listing ``task``, beside its ``runyard.tasks`` entry point."""
    manifest = f"tasks:\n  {task}: {project.module}:Greet\n"
    (project.root / "src" / project.module / "plugin.yaml").write_text(manifest)
    backend = project.root / "tinybackend.py"
    runyard_only = f"[runyard.tasks]\n{task} = {project.module}:Greet\n"
    both = f"{runyard_only}[axonx.plugins]\n{task} = {project.module}\n"
    text = backend.read_text()
    assert repr(runyard_only) in text
    backend.write_text(text.replace(repr(runyard_only), repr(both)))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from agent_support import PACKAGES

    tmp = tmp_path_factory.mktemp("axonx-plugins")
    python = layered_venv(tmp / "venv")
    config = {
        "allow_plugin_install": True,
        "agent_packages_dir": str(PACKAGES),  # for a run token
        "agent_sandbox": "none",
    }
    server = start_server(tmp / "srv", python=str(python), config=config)
    try:
        yield Site(python, server, tmp)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def axonx(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), site.server, tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


def job(server: ServerProcess, name: str, headers: dict[str, str] | None = None, **args: Any):
    with httpx.Client(base_url=server.url, headers=headers or server.headers, timeout=120) as c:
        return c.post(f"/jobs/{name}", json={"arguments": args})


MODELS = "axonx.plugin_kit.models"


def test_a_wheel_installed_by_the_axonx_cli_is_listed_run_and_uninstalled(
    site: Site, axonx: AxonX
) -> None:
    task = f"greet_{uuid.uuid4().hex[:6]}"
    project, wheel = site.wheel(task)
    path, digest = site.stage(wheel)
    installed = axonx.ok("install_plugin", "--path", path, "--sha256", digest.upper())
    answer = installed["answer"]
    validates(f"{MODELS}.PluginInstallResult", answer)
    assert answer["distribution"] == project.name and answer["tasks"] == {
        task: f"{project.module}:Greet"
    }
    assert answer["plugins"] == [task] and answer["restart_required"] is False
    assert "Successfully installed" in installed["metadata"]["pip_output"]

    listed = axonx.ok("list_plugins")["answer"]
    validates(f"{MODELS}.PluginInfo", listed, many=True)
    assert [p for p in listed if p["distribution"] == project.name] == [
        {k: v for k, v in answer.items() if k != "restart_required"}
    ]
    by_task = axonx.ok("inspect_plugin", "--plugin", task)["answer"]
    validates(f"{MODELS}.PluginInfo", by_task)
    assert by_task["distribution"] == project.name

    handle = site.server.call("submit", task=task, task_name="hi", who="axonx")["answer"]
    final = site.server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["answer"]["state"] == "succeeded", final
    assert final["answer"]["result"]["greeting"] == "Hello, axonx!"

    removed = axonx.ok("uninstall_plugin", "--plugin", project.name)["answer"]
    validates(f"{MODELS}.PluginUninstallResult", removed)
    assert removed == {"distribution": project.name, "restart_required": True}
    assert not site.installed(project.name)
    assert project.name not in [p["distribution"] for p in axonx.ok("list_plugins")["answer"]]


def test_axonx_plugin_install_uploads_the_wheel_through_post_files(
    site: Site, axonx: AxonX
) -> None:
    """``axonx plugin install <wheel> --target``: AxonX copies the wheel with POST /files,
    calls install_plugin on the copy with its sha256, then discards it with DELETE /files."""
    task = f"greet_{uuid.uuid4().hex[:6]}"
    project, wheel = site.wheel(task, axonx_plugin=True)
    reply = axonx.cli("plugin", "install", str(wheel))
    assert reply["rc"] == 0, reply
    answer = json.loads(reply["out"])
    validates(f"{MODELS}.PluginInstallResult", answer)
    assert answer["distribution"] == project.name and answer["plugins"] == [task]

    handle = site.server.call("submit", task=task, task_name="pushed", who="peer")["answer"]
    final = site.server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["answer"]["result"]["greeting"] == "Hello, peer!", final
    staged = site.server.workspace / "tmp"
    assert [p for p in staged.rglob("*") if p.is_file()] == []  # the copy was discarded

    removed = axonx.cli("plugin", "uninstall", project.name)
    assert removed["rc"] == 0, removed
    assert not site.installed(project.name)


def test_a_requirement_is_installed_and_an_option_is_never_passed_to_pip(site: Site) -> None:
    task = f"greet_{uuid.uuid4().hex[:6]}"
    project, wheel = site.wheel(task)
    reply = job(site.server, "install_plugin", requirement=f"{project.name} @ {wheel.as_uri()}")
    assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
    assert reply.json()["answer"]["plugins"] == [task]
    for option in ("--index-url=http://127.0.0.1:9/simple", "-r /etc/passwd", " -e ."):
        refused = job(site.server, "install_plugin", requirement=option).json()
        assert refused["success"] is False and "not a requirement" in refused["answer"], refused
    uninstalled = job(site.server, "uninstall_plugin", plugin=task).json()  # by task name
    assert uninstalled["answer"]["distribution"] == project.name, uninstalled


def test_a_wheel_is_installed_only_as_staged_in_the_workspace_with_its_sha256(
    site: Site,
) -> None:
    task = f"greet_{uuid.uuid4().hex[:6]}"
    project, wheel = site.wheel(task)
    path, digest = site.stage(wheel)
    wrong = hashlib.sha256(b"another wheel").hexdigest()
    outside = site.tmp / "outside"
    outside.mkdir()
    shutil.copy(wheel, outside / wheel.name)
    link = f"links/{wheel.name}"
    (site.server.workspace / "links").mkdir()
    (site.server.workspace / link).symlink_to(outside / wheel.name)
    (site.server.workspace / "linked").symlink_to(outside)
    attempts = [
        ("sha256 of", {"path": path, "sha256": wrong}),
        ("not a wheel", {"path": "server.json", "sha256": digest}),
        ("unsafe path", {"path": f"../{wheel.name}", "sha256": digest}),
        ("symbolic link", {"path": link, "sha256": digest}),
        ("symbolic link", {"path": f"linked/{wheel.name}", "sha256": digest}),
        ("unsafe path", {"path": str(outside / wheel.name), "sha256": digest}),
    ]
    plain, no_tasks = site.wheel(None)
    bare_path, bare_digest = site.stage(no_tasks)
    attempts.append(("registers no runyard task", {"path": bare_path, "sha256": bare_digest}))
    for why, args in attempts:
        answer = job(site.server, "install_plugin", **args).json()
        assert answer["success"] is False and why in answer["answer"].lower(), (args, answer)
    assert not site.installed(project.name) and not site.installed(plain.name)
    reply = job(site.server, "list_plugins").json()["answer"]
    assert project.name not in [p["distribution"] for p in reply]


def test_only_a_plugin_is_uninstalled(site: Site) -> None:
    for name in ("runyard", "pydantic", "pip"):
        answer = job(site.server, "uninstall_plugin", plugin=name).json()
        assert answer["success"] is False and "Unknown plugin" in answer["answer"], answer
        assert site.installed(name)
    assert job(site.server, "inspect_plugin", plugin="pydantic").json()["success"] is False


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("install_plugin", {}),
        ("install_plugin", {"path": "x.whl"}),
        ("install_plugin", {"sha256": "a" * 64}),
        ("install_plugin", {"path": "x.whl", "sha256": "a" * 63}),
        ("install_plugin", {"path": "x.whl", "sha256": "a" * 64, "requirement": "x"}),
        ("install_plugin", {"path": "x.whl", "sha256": "a" * 64, "force": True}),
        ("install_plugin", {"path": "", "sha256": "a" * 64}),
        ("uninstall_plugin", {}),
        ("uninstall_plugin", {"plugin": ""}),
        ("uninstall_plugin", {"plugin": "x", "purge": True}),
        ("inspect_plugin", {"plugin": 3}),
    ],
)
def test_bad_arguments_are_422(site: Site, name: str, args: dict[str, Any]) -> None:
    reply = job(site.server, name, **args)
    assert reply.status_code == 422, reply.text


def test_install_and_uninstall_are_refused_with_the_setting_off(site: Site, tmp_path: Path) -> None:
    task = f"greet_{uuid.uuid4().hex[:6]}"
    project, wheel = site.wheel(task)
    server = start_server(tmp_path / "off", python=str(site.python))
    try:
        shutil.copy(wheel, server.workspace / wheel.name)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        for name, args in (
            ("install_plugin", {"path": wheel.name, "sha256": digest}),
            ("install_plugin", {"requirement": f"{project.name} @ {wheel.as_uri()}"}),
            ("uninstall_plugin", {"plugin": "ryaxp-absent"}),
        ):
            reply = job(server, name, **args)
            assert reply.status_code == 403, reply.text
            assert "allow_plugin_install" in reply.text
        assert not site.installed(project.name) and site.installed("runyard-research")
        assert job(server, "list_plugins").json()["success"] is True  # reading stays on
    finally:
        server.stop()


def test_a_run_token_is_refused_every_plugin_job(site: Site) -> None:
    from api_helpers import api, create_run, new_session, wait_file, wait_run

    task = f"greet_{uuid.uuid4().hex[:6]}"
    project, wheel = site.wheel(task)
    path, digest = site.stage(wheel)
    admin = api(site.server)
    session_id = new_session(admin)
    run = create_run(admin, session_id, "token\nwait-for go\nanswer done", package="probe")
    as_run = {"authorization": f"Bearer {wait_file(admin, run['id'], 'token').decode()}"}
    try:
        for name, args in (
            ("list_plugins", {}),
            ("inspect_plugin", {"plugin": "runyard-research"}),
            ("install_plugin", {"path": path, "sha256": digest}),
            ("uninstall_plugin", {"plugin": "ryaxp-absent"}),
        ):
            reply = job(site.server, name, as_run, **args)
            assert reply.status_code == 403, (name, reply.text)
        assert not site.installed(project.name) and site.installed("runyard-research")
    finally:
        (site.server.workspace / "agent" / "session-state" / session_id / "go").touch()
        assert wait_run(admin, run["id"])["state"] == "succeeded"
        admin.close()
