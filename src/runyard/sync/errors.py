"""Errors of task sync, in the :class:`runyard.errors.RunyardError` family::

RunyardError
└── SyncError                   a push that could not reach or talk to the receiver
    ├── SyncRefused             the receiver refused one task (code + reason)
    └── UnsendableTask          the sender will not send one task (its folder breaks a rule)
"""

from __future__ import annotations

from runyard.errors import RunyardError


class SyncError(RunyardError):
    """A push that could not be carried out (receiver unreachable, bad answer)."""


class SyncRefused(SyncError):
    """The receiver refused one task; ``code`` is machine-readable, the message says why.

    Codes: ``active`` (the receiver's task is queued or running), ``newer`` (the receiver
    holds a run that finished later), ``bad_member`` (a tar member that is not a plain
    file or folder inside the task: a link, a device, a sparse file, ``..``, an absolute,
    hidden, repeated or over-long name, a folder too deep), ``too_large`` (more bytes
    than the receiver's ``sync.max_task_mb``), ``verification`` (records or artifact
    hashes that do not match), ``not_finished`` (the offered task is not terminal).
    """

    def __init__(self, task_id: str, code: str, reason: str) -> None:
        self.task_id = task_id
        self.code = code
        self.reason = reason
        super().__init__(f"{task_id}: {reason}")


class UnsendableTask(SyncError):
    """A local task the sender does not send: its status is not a valid record of it, or
    its folder is deeper than a receiver takes. Reported as refused; the push goes on."""

    def __init__(self, task_id: str, reason: str) -> None:
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"{task_id}: {reason}")
