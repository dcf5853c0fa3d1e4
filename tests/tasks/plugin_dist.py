"""Real plugin distributions for tests: a project built in a folder by pip, and a venv of
its own to install it into.

The venv is layered on the test venv (a ``.pth`` file hands it the test venv's packages,
runyard included), so pip writes the plugin's files, its ``.dist-info`` and, for an
editable install, its ``.pth`` into a site folder no other test reads: plugins installed
here never show up in another test running beside this one.

The project carries its own PEP 517 backend (``backend-path``), so ``pip install
--no-build-isolation`` builds it with nothing to fetch: a wheel of the package, or for
``pip install -e`` a wheel holding only a ``.pth`` that names the source folder, as flit
and hatchling build them.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

BACKEND = """
import base64, hashlib, os, zipfile

NAME, MODULE, VERSION, ENTRY_POINTS = {name!r}, {module!r}, {version!r}, {entry_points!r}
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src")


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {{}}
    for name in sorted(os.listdir(os.path.join(SOURCE, MODULE))):
        with open(os.path.join(SOURCE, MODULE, name), "rb") as handle:
            files[MODULE + "/" + name] = handle.read()
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {{MODULE + ".pth": (SOURCE + "\\n").encode()}})


def _wheel(directory, files):
    info = MODULE + "-" + VERSION + ".dist-info"
    files[info + "/METADATA"] = (
        "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n"
    ).encode()
    files[info + "/WHEEL"] = b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    files[info + "/entry_points.txt"] = ENTRY_POINTS.encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(path + ",sha256=" + digest + "," + str(len(data)))
    files[info + "/RECORD"] = ("\\n".join(record + [info + "/RECORD,,"]) + "\\n").encode()
    wheel = MODULE + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, wheel), "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
"""

PYPROJECT = """[build-system]
requires = []
build-backend = "tinybackend"
backend-path = ["."]

[project]
name = "{name}"
version = "{version}"
"""


@dataclass
class PluginProject:
    root: Path
    name: str  # the distribution
    module: str
    version: str

    @property
    def module_file(self) -> Path:
        return self.root / "src" / self.module / "__init__.py"


def write_project(
    root: Path, name: str, tasks: dict[str, str], code: str, version: str = "0.1.0"
) -> PluginProject:
    """A plugin project: ``code`` is its module, ``tasks`` maps a task name to a class."""
    module = name.replace("-", "_")
    entry_points = "[runyard.tasks]\n" + "".join(
        f"{task} = {module}:{cls}\n" for task, cls in tasks.items()
    )
    (root / "src" / module).mkdir(parents=True)
    (root / "src" / module / "__init__.py").write_text(code)
    (root / "pyproject.toml").write_text(PYPROJECT.format(name=name, version=version))
    backend = BACKEND.format(name=name, module=module, version=version, entry_points=entry_points)
    (root / "tinybackend.py").write_text(backend)
    return PluginProject(root, name, module, version)


def layered_venv(folder: Path) -> Path:
    """A venv whose Python also sees the test venv's packages; its interpreter's path."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60
    )
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    parent = sysconfig.get_path("purelib")
    # addsitedir, not a plain path line: the test venv's own .pth files (runyard's
    # editable install) must be read too
    line = f"import site; site.addsitedir({parent!r})\n"
    (Path(purelib) / "_runyard_test_parent.pth").write_text(line)
    return python


def pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", *args, "--disable-pip-version-check", "--no-input"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def install(python: Path, project: PluginProject, *, editable: bool = False) -> None:
    where = ["-e", str(project.root)] if editable else [str(project.root)]
    pip(python, "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet", *where)


def uninstall(python: Path, project: PluginProject) -> None:
    pip(python, "uninstall", "--yes", "--quiet", project.name)
