"""Give a command the options every command shares, and what they select.

``@with_backend`` adds ``--url --token --workspace-dir --log-dir --config`` to a command
and calls it with a backend (the server when one answers, else the files);
``@with_client`` does the same with a client of the server. Either makes the command's
``task_id``/``task_ids`` full ids first (a task's name is enough, :mod:`runyard.cli.taskref`)
and turns a runyard error into a one-line message and a non-zero exit.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runyard.cli.common import (
    ConfigOpt,
    LogDirOpt,
    TokenOpt,
    UrlOpt,
    WorkspaceOpt,
    fail,
    load_place,
)
from runyard.cli.errors import plain
from runyard.cli.taskref import resolved_refs
from runyard.errors import RunyardError

if TYPE_CHECKING:
    from runyard.cli.locate import Place
    from runyard.client import Client
    from runyard.config import Settings

KW = inspect.Parameter.KEYWORD_ONLY
COMMON = [
    inspect.Parameter("url", KW, default=None, annotation=UrlOpt),
    inspect.Parameter("token", KW, default=None, annotation=TokenOpt),
    inspect.Parameter("workspace_dir", KW, default=None, annotation=WorkspaceOpt),
    inspect.Parameter("log_dir", KW, default=None, annotation=LogDirOpt),
    inspect.Parameter("config", KW, default=None, annotation=ConfigOpt),
]


def _open_backend(settings: Place | Settings, url: str | None, token: str | None) -> Any:
    from runyard.cli.backend import open_backend

    return open_backend(settings, url, token)


def _require_client(settings: Place | Settings, url: str | None, token: str | None) -> Client:
    from runyard.cli.backend import connect

    client = connect(settings, url, token)
    if client is None:
        fail("no server found for this workspace: start one with `runyard serve` or pass --url")
    return client


def _with_common(fn: Callable[..., Any], make: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(fn)
    # the first parameter receives what ``make`` made; its annotation (a client or backend
    # class) is never evaluated, so the command's module need not import it at start
    own = [_evaluated(param, fn) for param in list(signature.parameters.values())[1:]]

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        common = {param.name: kwargs.pop(param.name) for param in COMMON}
        settings = load_place(common["workspace_dir"], common["log_dir"], common["config"])
        made = make(settings, common["url"], common["token"])
        try:
            return fn(made, **resolved_refs(made, kwargs))  # task names to full ids
        except (RunyardError, KeyError) as exc:
            fail(*plain(exc))

    params = own + COMMON
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=inspect.Signature.empty
    )
    command.__annotations__ = {param.name: param.annotation for param in params}
    return command


def _evaluated(param: inspect.Parameter, fn: Callable[..., Any]) -> inspect.Parameter:
    """``param`` with its (string) annotation evaluated in ``fn``'s module."""
    if not isinstance(param.annotation, str):
        return param
    return param.replace(annotation=eval(param.annotation, fn.__globals__))  # noqa: S307


def with_backend(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _with_common(fn, _open_backend)


def with_client(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _with_common(fn, _require_client)
