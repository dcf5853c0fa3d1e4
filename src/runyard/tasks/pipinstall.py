"""pip, run on the server's own interpreter (``sys.executable -m pip``), for the
``install_plugin`` and ``uninstall_plugin`` jobs (:mod:`runyard.api.plugin_jobs`).

One pip runs at a time (a second waits for the first: two pips writing one site folder
break it). Each is killed past its timeout and its output (stdout and stderr, the last
:data:`MAX_OUTPUT_CHARS` characters) is returned either way. Nothing here reads a shell:
the arguments are a list, and a requirement is checked to be one before pip sees it, so
``--index-url=...`` or ``-r file`` cannot be slipped in as a requirement.

A wheel to install is given as a file in the workspace with the sha256 its sender saw: it
is opened once without following a symlink, copied into a private temporary folder while
hashed, and pip installs that copy, so the file checked is the file installed; a wheel
that declares no ``runyard.tasks`` entry point is no plugin and is not installed.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from runyard.errors import InvalidInput, RunyardError
from runyard.tasks.registry import ENTRY_POINT_GROUP
from runyard.workspace.safefs import open_under

MAX_OUTPUT_CHARS = 20_000
PIP_FLAGS = ("--disable-pip-version-check", "--no-input")
_PIP_LOCK = threading.Lock()
_COPY_BYTES = 1 << 20


class PipFailed(RunyardError):
    """pip exited non-zero or ran past its timeout; the message carries its output."""


@dataclass(frozen=True)
class PipOutcome:
    distribution: str  # the distribution's name as given (a wheel's, a requirement's)
    output: str


def requirement_name(requirement: str) -> str:
    """The distribution a PEP 508 requirement names; InvalidInput for anything else.

    >>> requirement_name("runyard-hello[gpu]>=0.2")
    'runyard-hello'
    >>> requirement_name("--index-url=https://example.org")
    Traceback (most recent call last):
    runyard.errors.InvalidInput: not a requirement: '--index-url=https://example.org'
    """
    text = requirement.strip()
    try:
        if text.startswith("-"):
            raise InvalidRequirement("an option")
        return Requirement(text).name
    except InvalidRequirement:
        raise InvalidInput(f"not a requirement: {requirement!r}") from None


def install_wheel(workspace: Path, relative: str, sha256: str, timeout: float) -> PipOutcome:
    """Install the wheel at ``relative`` under ``workspace`` if its sha256 is ``sha256``."""
    with tempfile.TemporaryDirectory(prefix="runyard-plugin-") as folder:
        copy = _copy_checked(workspace, relative, sha256.lower(), Path(folder))
        if not registers_tasks(copy):
            raise InvalidInput(f"{relative!r} registers no runyard task; not installed")
        name = parse_wheel_filename(copy.name)[0]
        output = run_pip(["install", str(copy)], timeout)
    return PipOutcome(str(name), output)


def install_requirement(requirement: str, timeout: float) -> PipOutcome:
    name = requirement_name(requirement)
    output = run_pip(["install", requirement.strip()], timeout)
    return PipOutcome(name, output)


def uninstall(distribution: str, timeout: float) -> PipOutcome:
    output = run_pip(["uninstall", "--yes", str(canonicalize_name(distribution))], timeout)
    return PipOutcome(distribution, output)


def run_pip(args: list[str], timeout: float) -> str:
    """``python -m pip ARGS``: its output; PipFailed with it when pip fails or times out."""
    command = [sys.executable, "-m", "pip", *args, *PIP_FLAGS]
    with _PIP_LOCK:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            output = _text(exc.stdout) + _text(exc.stderr)
            raise PipFailed(f"pip {args[0]} ran past {timeout:g} s: {_tail(output)}") from None
    output = _tail(done.stdout + done.stderr)
    if done.returncode != 0:
        raise PipFailed(f"pip {args[0]} failed (exit {done.returncode}): {output}")
    return output


def registers_tasks(wheel: Path) -> bool:
    """Whether the wheel declares at least one entry point in the ``runyard.tasks`` group."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
            if len(names) != 1:
                return False
            text = archive.read(names[0]).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError, OSError):
        raise InvalidInput(f"{wheel.name} is not a readable wheel") from None
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return False
    return parser.has_section(ENTRY_POINT_GROUP) and bool(parser.items(ENTRY_POINT_GROUP))


def _copy_checked(workspace: Path, relative: str, sha256: str, folder: Path) -> Path:
    name = relative.rsplit("/", 1)[-1]
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        raise InvalidInput(f"{relative!r} is not a wheel (name-version-tags.whl)") from None
    digest = hashlib.sha256()
    target = folder / name
    with open_under(workspace, relative, single_link=True) as opened, target.open("wb") as out:
        while chunk := os.read(opened.fd, _COPY_BYTES):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha256:
        raise InvalidInput(f"sha256 of {relative!r} is {digest.hexdigest()}, not {sha256}")
    return target


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


def _tail(output: str) -> str:
    output = re.sub(r"\n{3,}", "\n\n", output.strip())
    return output[-MAX_OUTPUT_CHARS:]
