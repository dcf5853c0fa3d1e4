"""Process titles, so ``ps`` and ``top`` say what each runyard process is.

``runyard serve <workspace>``, ``runyard zygote``, ``runyard standby`` and, for a task
worker, ``runyard task <task_type> <task_id>``. The title replaces the command line shown
in ``/proc/<pid>/cmdline``; it never carries a secret (task ids and types are names the
user chose, the workspace is a path), and the payload of a worker stays on its stdin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from setproctitle import getproctitle
from setproctitle import setproctitle as _set


def prepare_titles() -> None:
    """Find the command line's memory now, while ``environ`` is the one the process started
    with: setproctitle locates argv by walking from it, which fails in a forked child that
    replaced its environment first (the pre-forked launcher's children do). Children forked
    after this call can set their title."""
    getproctitle()


def set_title(*words: str) -> None:
    """Set the process title to ``runyard <words…>`` (control characters become spaces)."""
    title = " ".join(["runyard", *words])
    clean = "".join(ch if ch.isprintable() else " " for ch in title)
    with contextlib.suppress(OSError):  # cosmetic: a title that cannot be set is no failure
        _set(clean)


@contextlib.contextmanager
def kept_title() -> Iterator[None]:
    """The title this process has now is its title again when the block ends."""
    before = getproctitle()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            _set(before)


def task_title(task_type: str, task_id: str) -> None:
    """The title of a worker running one task: ``runyard task <task_type> <task_id>``."""
    set_title("task", task_type, task_id)
