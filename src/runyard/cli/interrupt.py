"""Waiting on a task from the terminal: Ctrl-C, ``--timeout`` and a server that goes away.

A wait, a ``submit --wait`` or a ``watch`` only looks at a task; stopping the look never
stops the task. So on Ctrl-C (exit 130) or when ``--timeout`` runs out (exit 124, as
coreutils ``timeout``) the command says the task is still running and how to cancel it.
Agent runs are waited on the same way (``cancel``/``status`` name their commands).
A foreground ``runyard run`` is different: the task is this command's own work, so Ctrl-C
cancels it (see :func:`cancel_foreground`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

from runyard.cli.common import err_console, fail
from runyard.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TIMEOUT, plain
from runyard.errors import RunyardError, ServerUnreachable
from runyard.faults import fault_delay

if TYPE_CHECKING:
    from runyard.config import Settings
    from runyard.workspace.layout import Workspace
    from runyard.workspace.records import TaskStatus

T = TypeVar("T")
CANCEL_WAIT_EXTRA = 5.0  # seconds past the cancel grace to see the worker's end recorded


def still_running(
    task_id: str, code: int, why: str | None = None, *, cancel: str | None = None
) -> NoReturn:
    """Say the task runs on and how to stop it (``cancel``: the command, default
    ``runyard cancel TASK``), then exit with ``code``."""
    if why:
        err_console.print(why, highlight=False, soft_wrap=True)
    command = cancel or f"runyard cancel {task_id}"
    err_console.print(f"still running: {command}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def looking_at(
    task_id: str, *, cancel: str | None = None, status: str | None = None
) -> Iterator[None]:
    """Turn Ctrl-C, or losing the server, while following ``task_id`` into a plain exit;
    ``cancel``/``status`` are the commands to name (default: the task commands)."""
    try:
        yield
    except KeyboardInterrupt:
        still_running(task_id, EXIT_INTERRUPTED, cancel=cancel)
    except ServerUnreachable as exc:
        fail(
            f"Lost the server at {exc.url} while waiting; {task_id} may still be running "
            f"(see `{status or f'runyard status {task_id}'}`)",
            EXIT_FAILED,
        )


def bounded_wait(
    task_id: str, wait: Callable[[], T], timeout: float | None, *,
    cancel: str | None = None, status: str | None = None,
) -> T:  # fmt: skip
    """``wait()`` for at most ``timeout`` seconds (None: as long as it takes).

    The wait runs in a helper thread so that the main thread stays free for Ctrl-C and
    for the deadline; its errors are raised here. A wait abandoned by a timeout or Ctrl-C
    dies with the process — it only ever read.
    """
    box: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            box["error"] = exc
        finally:
            done.set()

    waiter = threading.Thread(target=run, name=f"wait-{task_id}", daemon=True)
    with looking_at(task_id, cancel=cancel, status=status):  # from before the thread starts
        fault_delay("cli.wait")
        waiter.start()
        if not done.wait(timeout):
            still_running(task_id, EXIT_TIMEOUT, f"timed out after {timeout:g}s", cancel=cancel)
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def cancel_foreground(
    settings: Settings, workspace: Workspace, task_id: str, run_id: str
) -> TaskStatus:
    """Cancel this command's own run (Ctrl-C on ``runyard run``) and its final status."""
    from runyard.runtime.liveness import wait_for_run
    from runyard.runtime.supervisor import Supervisor
    from runyard.tasks.registry import TaskRegistry

    err_console.print(f"interrupted: cancelling {task_id}", highlight=False, soft_wrap=True)
    try:
        Supervisor(settings, workspace, TaskRegistry.load()).cancel(task_id)
        timeout = settings.cancel_grace_seconds + CANCEL_WAIT_EXTRA
        return wait_for_run(workspace, task_id, run_id, poll_interval=0.05, timeout=timeout)
    except RunyardError as exc:
        fail(plain(exc)[0], EXIT_INTERRUPTED)
