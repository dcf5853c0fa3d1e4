"""The error family of runyard.

Every error raised on purpose by runyard derives from :class:`RunyardError`; foreign
errors are translated at the edge with ``raise ... from exc`` so the cause is kept.
Some also derive from the builtin the Job API protocol names in its answers
(``ValueError: Unknown Task: ...``, ``KeyError: ...``, ``FileExistsError: ...``)::

    RunyardError
    ├── ConfigError                      bad settings or config file
    │   └── WorkspaceNotFound            no workspace here, above, or where one was named
    ├── InvalidInput (ValueError)        bad ids, names, inputs, paths
    │   ├── InvalidTaskId
    │   ├── UnknownTask                  a registered name that does not exist
    │   ├── UnknownUpstream              a depends_on id that names no task
    │   ├── InvalidPipeline              a pipeline run request refused whole (its step named)
    │   ├── InvalidSchedule              a schedule, cron expression or range refused
    │   ├── UnsafePath                   a path that would leave its folder
    │   ├── InvalidLimit                 a row or item count outside its allowed range
    │   ├── ResourcesRefused             a resources ask this server cannot grant (422)
    │   ├── BadIdempotencyKey            an Idempotency-Key header that breaks its rule
    │   ├── NotParquet                   a file to preview that Parquet cannot read
    │   ├── StagedFileRefused            an upload to POST /files (or a discard) refused
    │   └── PreviewTooLarge              a preview past its decoded-bytes budget (413)
    ├── NoSuchFile (FileNotFoundError)   a file to serve that is missing or not regular
    ├── TaskNotFound (KeyError)          no status record for a task id
    │   └── NoTaskFolder                 no folder (or none the caller may see) for it
    ├── RunNotFound (KeyError)           no run of that id for a task (current or kept)
    ├── PipelineRunNotFound (KeyError)   no pipeline run of that id (or none the caller may see)
    ├── AmbiguousTaskId (LookupError)    a task name that names several tasks (409)
    ├── ScheduleNotFound (KeyError)      no schedule of that name
    ├── ScheduleExists (FileExistsError) a schedule name already taken
    ├── TaskActive (FileExistsError)     a fixed name whose task is still active
    ├── TaskNameTaken (FileExistsError)  a fixed name a run token may not replace
    ├── Forbidden (PermissionError)      an action the caller's token may not take
    ├── NotAuthenticated (PermissionError) no token that opens the route
    │   └── LoginCodeRefused             a login link's code that is spent, expired or unknown
    ├── RunMismatch (ValueError)         a run_id that is not the folder's current run
    ├── ExecutorError                    a worker could not be launched or controlled
    ├── InsufficientStorage (OSError)    no room for new work (HTTP 507); nothing was made
    ├── IdempotencyConflict              a reused Idempotency-Key with another body (409)
    ├── UpdateBusy                       an update or restart of the server already under way
    ├── PreviewUnavailable               previews need an optional package not installed
    ├── AgentError                       agent-run backend (see runyard.agents.errors)
    └── ClientError                      raised by runyard.client
        ├── ServerUnreachable            no answer from the server
        │   └── ServerNotFound           no server given, recorded or configured
        ├── WaitTimeout                  a wait that reached its timeout (the work goes on)
        ├── HTTPError                    a non-200 answer (status_code, detail)
        │   ├── Unauthorized (401)
        │   ├── NotFound (404)
        │   ├── PayloadTooLarge (413)
        │   └── RequestInvalid (422)
        └── JobFailed                    success=false with an "ErrorType: message" answer
"""

from __future__ import annotations


class RunyardError(Exception):
    """Base of every error runyard raises on purpose."""


class ConfigError(RunyardError):
    """Settings or a config file that cannot be used."""


class WorkspaceNotFound(ConfigError):
    """A command that reads a workspace found none (the message says how to make one)."""


class InvalidInput(RunyardError, ValueError):
    """Input that breaks a documented rule; the message says the rule."""


class InvalidTaskId(InvalidInput):
    def __init__(self, task_id: str, reason: str) -> None:
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"Invalid task id {task_id!r}: {reason}")


class UnknownUpstream(InvalidInput):
    """A ``depends_on`` id that names no task the caller may see (nothing was made)."""

    def __init__(self, task_ids: list[str]) -> None:
        self.task_ids = task_ids
        super().__init__(
            f"depends_on names no task: {', '.join(task_ids)} (an upstream must exist first)"
        )


class InvalidSchedule(InvalidInput):
    """A schedule that cannot be made as given (cron, time zone, task, a backfill range)."""


class ScheduleNotFound(RunyardError, KeyError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(name)

    def __str__(self) -> str:
        return f"No schedule named {self.name!r}"


class ScheduleExists(RunyardError, FileExistsError):
    """A schedule name already in use; ``configured`` when runyard.yaml defines it."""

    def __init__(self, name: str, configured: bool) -> None:
        self.name = name
        self.configured = configured
        where = "runyard.yaml defines it" if configured else "it was created over the API"
        super().__init__(f"Schedule {name!r} already exists ({where})")

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidPipeline(InvalidInput):
    """A pipeline run request refused whole, nothing made; ``step`` is the key of the step
    at fault (None when the fault is the pipeline's own)."""

    def __init__(self, message: str, step: str | None = None) -> None:
        self.step = step
        super().__init__(f"Step {step}: {message}" if step is not None else message)


class UnknownTask(InvalidInput):
    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        from runyard.suggest import did_you_mean  # a refusal's hint, loaded when refused

        hint = did_you_mean(name, available)
        super().__init__(f"Unknown Task: {name}.{hint} Available: {', '.join(available)}")


class UnsafePath(InvalidInput):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Unsafe path {path!r}: {reason}")


class InvalidLimit(InvalidInput):
    """A count (rows, items) outside the range its route allows."""


class ResourcesRefused(InvalidInput):
    """A run's ``resources`` that break their rules or ask for more than this server has
    (more GPUs than it controls, more CPUs or memory than ``task_limits``); nothing made."""


class BadIdempotencyKey(InvalidInput):
    """An ``Idempotency-Key`` header that is empty, too long or not printable ASCII."""


class NotParquet(InvalidInput):
    """A file asked for as a table that is not a Parquet file that can be read."""


class PreviewTooLarge(InvalidInput):
    """A preview that would decode more than its budget: ``decoded`` bytes of ``part``
    (its row groups, its metadata) of the file at ``path``, checked before decoding."""

    def __init__(self, path: str, decoded: int, budget: int, part: str) -> None:
        self.path = path
        self.decoded = decoded
        self.budget = budget
        self.part = part
        super().__init__(
            f"{path} is too large to preview ({part}: {decoded} bytes once decoded, the "
            f"preview budget is {budget} bytes); download it instead"
        )


class NoSuchFile(RunyardError, FileNotFoundError):
    """No regular file at ``path`` under its folder (missing, a folder, a device...)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"No file {path!r}: {reason}")

    def __str__(self) -> str:
        return str(self.args[0])


class TaskNotFound(RunyardError, KeyError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(task_id)

    def __str__(self) -> str:
        return f"No status for task {self.task_id!r}"


class RunNotFound(RunyardError, KeyError):
    """No run of that id for a task (neither its current run nor a kept one)."""

    def __init__(self, task_id: str, run_id: str) -> None:
        self.task_id = task_id
        self.run_id = run_id
        super().__init__(task_id, run_id)

    def __str__(self) -> str:
        return f"No run {self.run_id!r} of task {self.task_id!r}"


class NoTaskFolder(TaskNotFound):
    """No task folder for a task id, or one the caller may not see (answered the same)."""

    def __str__(self) -> str:
        return f"No task folder for {self.task_id}"


class AmbiguousTaskId(RunyardError, LookupError):
    """A short task reference (a name, ``type:name``) that names more than one task the
    caller may see; ``matches`` are their full ids (:mod:`runyard.workspace.lookup`)."""

    SHOWN = 20

    def __init__(self, ref: str, matches: list[str], message: str | None = None) -> None:
        self.ref = ref
        self.matches = matches
        shown = ", ".join(matches[: self.SHOWN])
        more = f" and {len(matches) - self.SHOWN} more" if len(matches) > self.SHOWN else ""
        said = f"{ref!r} names {len(matches)} tasks: {shown}{more}; pass one of these full ids"
        super().__init__(message or said)  # ``message``: a server's sentence, as it said it

    def __str__(self) -> str:
        return str(self.args[0])


class PipelineRunNotFound(RunyardError, KeyError):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"No pipeline run {run_id!r}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class TaskActive(RunyardError, FileExistsError):
    def __init__(self, task_id: str, state: str) -> None:
        self.task_id = task_id
        self.state = state
        super().__init__(
            f"Task {task_id} is still {state}; a fixed name replaces only a finished task"
        )


class ActiveTaskFiles(TaskActive):
    """A workspace delete that reaches into a task that has not finished (409)."""

    def __init__(self, task_id: str, state: str) -> None:
        super().__init__(task_id, state)
        self.args = (f"Task {task_id} is still {state}; its files are deleted once it ends",)


class TaskNameTaken(RunyardError, FileExistsError):
    """A fixed task name an agent run may not use: a task not of its session holds it."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(
            f"Task name of {task_id} is not available to this run; choose another task_name "
            "or leave it empty for a generated one"
        )


class Forbidden(RunyardError, PermissionError):
    """An action the caller's token does not allow; the message says why."""


class NotAuthenticated(RunyardError, PermissionError):
    """A request to the server without a token that opens its route."""


class LoginCodeRefused(NotAuthenticated):
    """The code of a one-time login link that was spent, has expired or was never minted."""


class ForeignHost(Forbidden):
    """A request whose ``Host`` does not name this server (DNS rebinding)."""


class ForeignOrigin(Forbidden):
    """A request sent by a page of another origin (CSRF)."""


class UnsupportedMediaType(InvalidInput):
    """A request body of a content type its route does not take."""


class BodyTooLarge(InvalidInput):
    """A request body past the server's size limit."""


class StagedFileRefused(InvalidInput):
    """An upload to AxonX's ``POST /files`` or a ``DELETE /files`` refused: its file name,
    or a directory or path outside the workspace's ``tmp/`` (the cause says which)."""


class UnnameablePath(RunyardError, FileNotFoundError):
    """A request path no file or record can have (a name past the system's limits)."""


class BadEventId(InvalidInput):
    """A ``Last-Event-ID`` that is no event id its stream could have sent."""


class BadStreamQuery(InvalidInput):
    """A query parameter of an event stream that breaks its rule (``?metrics=maybe``)."""


class UnknownJob(RunyardError, LookupError):
    """A Job API call to a job name the server does not have."""


class MisplacedTarget(InvalidInput):
    """A Job call's ``target`` given inside its ``arguments`` instead of beside them."""


class UnknownTarget(InvalidInput):
    """A Job call forwarded to a remote runyard the settings do not name."""


class ServiceUnavailable(RunyardError):
    """The server is up but not ready for this request yet (its start-up is under way)."""


class ServerStopping(ServiceUnavailable):
    """The server stopped before this request was done (its drain ran out)."""


class UpstreamError(RunyardError):
    """A remote runyard a call was forwarded to could not be reached or answered no JSON."""


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


class InsufficientStorage(RunyardError, OSError):
    """New work refused for lack of disk space (HTTP 507); nothing half-made was left."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "Insufficient storage"


class IdempotencyConflict(RunyardError):
    """An ``Idempotency-Key`` already used with a different request body (HTTP 409)."""


class UpdateBusy(RunyardError):
    """An update or restart of the server asked for while another is under way."""


class PreviewUnavailable(RunyardError):
    """A preview needs an optional package the server's environment does not have."""


class AgentError(RunyardError):
    """Base of the agent-run backend's errors."""


class ClientError(RunyardError):
    """Raised by :mod:`runyard.client`."""


class ServerUnreachable(ClientError):
    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"Cannot reach runyard at {url}: {reason}")


class ServerNotFound(ServerUnreachable):
    """No server to talk to: none given, none recorded by a workspace, none configured."""

    def __init__(self, reason: str) -> None:
        self.url = ""
        self.reason = reason
        ClientError.__init__(self, reason)


class WaitTimeout(ClientError, TimeoutError):
    """A wait ended by its ``timeout``; the task or run it waited on goes on running."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"{what} is still running after {timeout:g} s")


class HTTPError(ClientError):
    """``detail`` is the server's message; ``code`` the ``/api/v1`` error code when the
    answer carried one (``""`` otherwise)."""

    def __init__(self, status_code: int, detail: object, code: str = "") -> None:
        self.status_code = status_code
        self.detail = detail
        self.code = code
        super().__init__(f"HTTP {status_code}: {detail}")


class Unauthorized(HTTPError):
    pass


class NotFound(HTTPError):
    pass


class PayloadTooLarge(HTTPError):
    pass


class RequestInvalid(HTTPError):
    pass


class JobFailed(ClientError):
    """A job answered ``success: false``; ``error_type`` is the part before the colon."""

    def __init__(self, job: str, answer: str) -> None:
        self.job = job
        self.answer = answer
        self.error_type, _, self.message = answer.partition(": ")
        super().__init__(f"{job} failed: {answer}")
