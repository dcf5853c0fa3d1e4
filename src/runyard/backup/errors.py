"""The backup package's error: one class, a member of the :class:`RunyardError` family."""

from __future__ import annotations

from runyard.errors import RunyardError


class BackupError(RunyardError):
    """A backup could not be made, verified or restored; the message says why."""
