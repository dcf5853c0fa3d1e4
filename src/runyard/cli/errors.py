"""Errors as the CLI shows them: one plain sentence and an exit code.

The Job API answers a failure as ``"ErrorType: message"`` (the protocol names a Python
builtin), and the client keeps the job's name; neither means anything to a person at a
terminal, so both are dropped here. Exit codes:

====  =====================================================================
1     not found, refused, failed, or the server could not be reached; also a task
      waited for (run, submit --wait, wait) that failed or was cancelled: its own
      exit code is in the message and in ``--json`` (cli/ended.py)
2     bad input: an unknown task, a bad field value, a malformed id, a task name of
      several tasks
124   a ``--timeout`` ran out; the task is still running
130   interrupted (Ctrl-C)
====  =====================================================================
"""

from __future__ import annotations

import re

from runyard.errors import (
    AmbiguousTaskId,
    HTTPError,
    InvalidInput,
    JobFailed,
    ServerUnreachable,
    TaskNotFound,
    Unauthorized,
)

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130

_USAGE_TYPES = {"ValueError", "TypeError"}
_NO_STATUS = re.compile(r"^No status for task '([^']*)'$")


def _sentence(message: str) -> str:
    """The message with a ``KeyError``'s quotes gone and known record jargon said plainly."""
    text = message.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    found = _NO_STATUS.match(text)
    if found:
        return f"Task {found.group(1)} does not exist"
    return text


def plain(exc: BaseException) -> tuple[str, int]:
    """``(message, exit code)`` for an error raised under a CLI command."""
    if isinstance(exc, JobFailed):
        code = EXIT_USAGE if exc.error_type in _USAGE_TYPES else EXIT_FAILED
        return _sentence(exc.message or exc.answer), code
    if isinstance(exc, ServerUnreachable):
        return f"Cannot reach the runyard server at {exc.url}; is it running?", EXIT_FAILED
    if isinstance(exc, Unauthorized):
        message = "The server refused the token (401); pass --token or set RUNYARD_TOKEN"
        return message, EXIT_FAILED
    if isinstance(exc, HTTPError):
        return f"The server answered {exc.status_code}: {_sentence(str(exc.detail))}", EXIT_FAILED
    if isinstance(exc, TaskNotFound):
        return f"Task {exc.task_id} does not exist", EXIT_FAILED
    if isinstance(exc, AmbiguousTaskId):  # the sentence lists the full ids to pass instead
        return str(exc), EXIT_USAGE
    if isinstance(exc, InvalidInput):
        return _sentence(str(exc)), EXIT_USAGE
    if isinstance(exc, KeyError) and exc.args:
        return _sentence(str(exc.args[0])), EXIT_FAILED
    return _sentence(str(exc)), EXIT_FAILED


def job_failure(job: str, answer: object) -> tuple[str, int]:
    """``plain`` of a failed job's ``"ErrorType: message"`` answer (e.g. in a stream)."""
    return plain(JobFailed(job, str(answer)))
