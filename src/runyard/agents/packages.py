"""Agent packages: a folder with a ``manifest.json`` naming its entry command.

::

    {"name": "reference", "version": "1.0.0",
     "description": "Reads its inputs, keeps a checkpoint, calls the Job API, answers.",
     "entry": ["{python}", "{package}/agent.py"]}

``{package}`` becomes the package folder as the run sees it (``/opt/agent/package`` in the
sandbox), ``{python}`` the interpreter runs use (``agent_python``, else the server's base
interpreter, or ``python3`` of the image on Kubernetes). A run names its package by
``name``: a folder under ``agent_packages_dir``; without a name it gets ``agent_package``
when configured, else the reference package that ships with runyard.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runyard.agents.errors import AgentInvalid, PackageNotFound
from runyard.config import Settings

MANIFEST = "manifest.json"
PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REFERENCE_DIR = Path(__file__).parent / "reference_package"


class Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(pattern=PACKAGE_NAME.pattern)
    version: str = Field(min_length=1, max_length=64)
    description: str = ""
    entry: list[str] = Field(min_length=1)

    @field_validator("entry", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return shlex.split(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class AgentPackage:
    path: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.manifest.name

    def argv(self, package_dir: str, python: str) -> list[str]:
        return [
            part.replace("{package}", package_dir).replace("{python}", python)
            for part in self.manifest.entry
        ]

    def describe(self, package_dir: str) -> dict[str, str]:
        return {
            "name": self.manifest.name,
            "version": self.manifest.version,
            "description": self.manifest.description,
            "path": package_dir,
        }


def load_package(folder: Path) -> AgentPackage:
    """The package in ``folder``; AgentInvalid when its manifest is missing or invalid."""
    manifest_path = folder / MANIFEST
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise AgentInvalid(f"Agent package {folder} has no {MANIFEST}") from exc
    except (OSError, ValueError) as exc:
        raise AgentInvalid(f"Cannot read {manifest_path}: {exc}") from exc
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise AgentInvalid(f"Invalid manifest {manifest_path}: {problems}") from exc
    return AgentPackage(Path(os.path.realpath(folder)), manifest)


def reference_package() -> AgentPackage:
    return load_package(REFERENCE_DIR)


def available_packages(settings: Settings) -> list[str]:
    names = {reference_package().name}
    folder = settings.agent_packages_dir
    if folder is not None and folder.is_dir():
        names.update(
            entry.name
            for entry in folder.iterdir()
            if PACKAGE_NAME.match(entry.name) and (entry / MANIFEST).is_file()
        )
    return sorted(names)


def resolve_package(settings: Settings, name: str | None) -> AgentPackage:
    """The package a run asked for (``name``), else the configured default, else reference."""
    if not name:
        if settings.agent_package is not None:
            return load_package(settings.agent_package)
        return reference_package()
    if not PACKAGE_NAME.match(name):
        raise AgentInvalid(f"Package name {name!r} must match {PACKAGE_NAME.pattern}")
    folder = settings.agent_packages_dir
    if folder is not None and (folder / name / MANIFEST).is_file():
        return load_package(folder / name)
    reference = reference_package()
    if name == reference.name:
        return reference
    raise PackageNotFound(name, available_packages(settings))


def package_for_run(settings: Settings, name: str) -> AgentPackage:
    """The package a stored run names (the configured default answers to its own name)."""
    if settings.agent_package is not None:
        default = load_package(settings.agent_package)
        if default.name == name:
            return default
    return resolve_package(settings, name)


def run_python(settings: Settings) -> str:
    """The interpreter ``{python}`` stands for."""
    if settings.agent_python is not None:
        return str(settings.agent_python)
    if settings.agent_executor == "kubernetes":
        return "python3"  # the image's
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def python_root(python: str) -> str | None:
    """The installation prefix the sandbox must show for ``python`` (None when under /usr)."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return None
    prefix = os.path.dirname(os.path.dirname(real))
    return prefix if prefix not in ("/", "") else None
