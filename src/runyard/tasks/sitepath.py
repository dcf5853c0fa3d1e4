"""Python's import path brought up to date in a running process.

An editable install (``pip install -e``) and many packagers put a ``.pth`` file in a site
folder; the interpreter reads those once, at start, so a server started before such an
install cannot import the package, nor can the workers its launcher forks. :class:`SitePath`
reads the ``.pth`` files of the site folders again, as ``site`` does at start: each folder
line that exists is appended to ``sys.path`` when it is not there yet (every file, every
time: that is idempotent), and each ``import`` line is run, but only for a file that
appeared or changed since the last look (a line such as setuptools'
``__editable___*_finder.install()`` must not run twice for the same install).
:data:`PROCESS_START` is the look taken when this module was imported, as near to the
interpreter's start as runyard gets. A folder that a removed ``.pth`` file named stays on
``sys.path``: taking it away would not unload what was imported from it.

>>> fresh = SitePath()
>>> fresh.refresh()  # nothing was installed since
[]
"""

from __future__ import annotations

import logging
import os
import site
import sys
from collections.abc import Iterator

PTH_SUFFIX = ".pth"
log = logging.getLogger(__name__)


def site_dirs() -> list[str]:
    """The folders whose ``.pth`` files the interpreter reads at start."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return folders


class SitePath:
    """The ``.pth`` files of the site folders, as they were at the last look.

    The first look is the construction: files present then were read by the interpreter
    at start (or will be, by the next one) and are not run again.
    """

    def __init__(self) -> None:
        self._seen: dict[str, int] = dict(_pth_files())

    def refresh(self) -> list[str]:
        """Add what new or changed ``.pth`` files name; returns the folders added."""
        added = self._add_site_dirs()
        for path, mtime in _pth_files():
            fresh = self._seen.get(path) != mtime
            self._seen[path] = mtime
            added.extend(_read_pth(path, run_imports=fresh))
        return added

    def _add_site_dirs(self) -> list[str]:
        """A user site folder made after the start (``pip install --user``) joins the path."""
        added = []
        for folder in site_dirs():
            if os.path.isdir(folder) and folder not in sys.path:
                sys.path.append(folder)
                added.append(folder)
        return added


def _pth_files() -> Iterator[tuple[str, int]]:
    for folder in site_dirs():
        try:
            names = sorted(os.listdir(folder))  # the order site reads them in
        except OSError:
            continue
        for name in names:
            if name.endswith(PTH_SUFFIX) and not name.startswith("."):
                path = os.path.join(folder, name)
                try:
                    yield path, os.stat(path).st_mtime_ns
                except OSError:
                    continue


def _read_pth(path: str, *, run_imports: bool) -> list[str]:
    """One ``.pth`` file, read as ``site.addpackage`` does; a broken line is skipped."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    folder = os.path.dirname(path)
    added = []
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            if run_imports:
                _run_import_line(line)
            continue
        entry = os.path.abspath(os.path.join(folder, line.rstrip()))
        if entry not in sys.path and os.path.exists(entry):
            sys.path.append(entry)
            added.append(entry)
    return added


def _run_import_line(line: str) -> None:
    # what site does with such a line at start; a failing one must not stop the others
    try:
        exec(line)  # noqa: S102 - a .pth import line is code by definition
    except Exception as exc:
        log.warning("a .pth import line failed: %r: %s: %s", line, type(exc).__name__, exc)


PROCESS_START = SitePath()
