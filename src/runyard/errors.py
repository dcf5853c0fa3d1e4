"""The error family of runyard.

Every error raised on purpose by runyard derives from :class:`RunyardError`; foreign
errors are translated at the edge with ``raise ... from exc`` so the cause is kept.
Some also derive from the builtin the Job API protocol names in its answers
(``ValueError: Unknown Task: ...``, ``KeyError: ...``, ``FileExistsError: ...``)::

    RunyardError
    ├── ConfigError                      bad settings or config file
    ├── InvalidInput (ValueError)        bad ids, names, inputs, paths
    │   ├── InvalidTaskId
    │   ├── UnknownTask                  a registered name that does not exist
    │   └── UnsafePath                   a path that would leave its folder
    ├── TaskNotFound (KeyError)          no status record for a task id
    ├── TaskActive (FileExistsError)     a fixed name whose task is still active
    ├── RunMismatch (ValueError)         a run_id that is not the folder's current run
    ├── ExecutorError                    a worker could not be launched or controlled
    └── AgentError                       agent-run backend (see runyard.agents.errors)
"""

from __future__ import annotations


class RunyardError(Exception):
    """Base of every error runyard raises on purpose."""


class ConfigError(RunyardError):
    """Settings or a config file that cannot be used."""


class InvalidInput(RunyardError, ValueError):
    """Input that breaks a documented rule; the message says the rule."""


class InvalidTaskId(InvalidInput):
    def __init__(self, task_id: str, reason: str) -> None:
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"Invalid task id {task_id!r}: {reason}")


class UnknownTask(InvalidInput):
    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        super().__init__(f"Unknown Task: {name}. Available: {', '.join(available)}")


class UnsafePath(InvalidInput):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Unsafe path {path!r}: {reason}")


class TaskNotFound(RunyardError, KeyError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(task_id)

    def __str__(self) -> str:
        return f"No status for task {self.task_id!r}"


class TaskActive(RunyardError, FileExistsError):
    def __init__(self, task_id: str, state: str) -> None:
        self.task_id = task_id
        self.state = state
        super().__init__(
            f"Task {task_id} is still {state}; a fixed name replaces only a finished task"
        )


class RunMismatch(RunyardError, ValueError):
    def __init__(self, task_id: str, run_id: str, current: str) -> None:
        self.task_id = task_id
        self.run_id = run_id
        self.current = current
        super().__init__(
            f"run_id {run_id} is not the current run of {task_id} (current run: {current})"
        )


class ExecutorError(RunyardError):
    """A worker could not be launched, polled or cancelled."""


class AgentError(RunyardError):
    """Base of the agent-run backend's errors."""
