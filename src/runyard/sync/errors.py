"""Errors of task sync, in the :class:`runyard.errors.RunyardError` family::

RunyardError
└── SyncError                   a push that could not reach or talk to the receiver
    └── SyncRefused             the receiver refused one task (code + reason)
"""

from __future__ import annotations

from runyard.errors import RunyardError


class SyncError(RunyardError):
    """A push that could not be carried out (receiver unreachable, bad answer)."""


class SyncRefused(SyncError):
    """The receiver refused one task; ``code`` is machine-readable, the message says why.

    Codes: ``active`` (the receiver's task is queued or running), ``newer`` (the receiver
    holds a run that finished later), ``bad_member`` (a tar member that is not a plain
    file or folder inside the task), ``verification`` (records or artifact hashes that do
    not match), ``not_finished`` (the offered task is not terminal).
    """

    def __init__(self, task_id: str, code: str, reason: str) -> None:
        self.task_id = task_id
        self.code = code
        self.reason = reason
        super().__init__(f"{task_id}: {reason}")
