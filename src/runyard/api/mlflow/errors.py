"""MLflow's error shape: ``{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": ...}``.

MLflow's client raises :class:`mlflow.exceptions.MlflowException` (``RestException``) for
any answer that is not 200 and whose body is a JSON object; it reads ``error_code`` and
``message`` from it, and retries only 429 and 5xx. So every refusal under ``/mlflow`` is a
4xx in this shape, with the status MLflow's own server uses for the code.

:class:`MlflowRefusal` is raised by the routes for what only MLflow's API can say (a
missing experiment, a param changed after it was logged); the family errors raised by
runyard's own code (an unsafe path, a task id, a body too large), and the refusals of the
middlewares (a missing token), answer through :func:`mlflow_error` with the status of
their row in the one table (:func:`runyard.api.errormap.render` sends every path under
``/mlflow/`` here), named as MLflow names it.
"""

from __future__ import annotations

import logging

from starlette.responses import JSONResponse

from runyard.errors import InvalidInput
from runyard.workspace.filenames import printable

log = logging.getLogger("runyard.api.mlflow")

INVALID = "INVALID_PARAMETER_VALUE"
NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
EXISTS = "RESOURCE_ALREADY_EXISTS"
INVALID_STATE = "INVALID_STATE"
ENDPOINT_NOT_FOUND = "ENDPOINT_NOT_FOUND"
# MLflow's names for runyard's statuses; what is not listed is INTERNAL_ERROR
CODE_OF_STATUS = {
    400: INVALID,
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: NOT_FOUND,
    405: ENDPOINT_NOT_FOUND,
    408: "REQUEST_LIMIT_EXCEEDED",
    409: EXISTS,
    413: INVALID,
    415: "BAD_REQUEST",
    422: INVALID,
    503: "TEMPORARILY_UNAVAILABLE",
    507: "RESOURCE_EXHAUSTED",  # a full disk: nothing was made
}
# the status MLflow's server answers each code of its own with
STATUS_OF_CODE = {INVALID: 400, NOT_FOUND: 404, EXISTS: 400, INVALID_STATE: 400,
                  ENDPOINT_NOT_FOUND: 404, "PERMISSION_DENIED": 403}  # fmt: skip


class MlflowRefusal(InvalidInput):
    """A request MLflow's API refuses, with MLflow's ``error_code`` (see the module)."""

    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.status = STATUS_OF_CODE.get(error_code, 400)


def mlflow_error(
    exc: BaseException, status: int, headers: tuple[tuple[str, str], ...] = ()
) -> JSONResponse:
    """The answer to ``exc`` under ``/mlflow``: MLflow's shape; ``status`` and ``headers``
    are those of its row in :mod:`runyard.api.errormap` (an :class:`MlflowRefusal` has
    its own)."""
    code = CODE_OF_STATUS.get(status, "INTERNAL_ERROR")
    if isinstance(exc, MlflowRefusal):
        status, code = exc.status, exc.error_code
    if status >= 500 and status not in (503, 507):
        log.error("%s answered %d: %s", type(exc).__name__, status, exc)
    body = {"error_code": code, "message": printable(str(exc))}
    return JSONResponse(body, status_code=status, headers=dict(headers))
