"""Routes without path parameters, found by their path in one dictionary lookup.

FastAPI tries a request's path against each route's pattern in turn, and an included
router's routes twice (once to pick the router, once inside it). A ``/jobs/<name>`` call, the
most frequent request, went through about thirty pattern matches: a sixth of the server's
time for a ``status``. :class:`ExactRoutes` stands where those routes are included, before
them, and picks among the ones whose path is exactly the request's. Everything else (a path
with parameters, a server under a ``root_path``, a websocket) falls through to the usual
matching, so which route answers does not change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send


class ExactRoutes(BaseRoute):
    """The parameterless :class:`~starlette.routing.Route` s of ``routes``, by path.

    A request whose path is one of theirs is matched by the routes of that path, in their
    order: the first that takes its method answers; when none does, the first one's
    partial match (a 405 if nothing else takes the request). The route that answers is the
    one the usual matching would have picked, provided this stands where ``routes`` do.
    """

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self.by_path: dict[str, list[Route]] = {}
        for route in routes:
            if isinstance(route, Route) and not route.param_convertors:
                self.by_path.setdefault(route.path, []).append(route)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope.get("root_path"):
            return Match.NONE, {}
        partial: Scope | None = None
        for route in self.by_path.get(scope["path"], ()):
            match, child_scope = route.matches(scope)
            if match is Match.NONE:
                continue
            child_scope["route"] = route  # which one :meth:`handle` hands the request to
            if match is Match.FULL:
                return match, child_scope
            partial = partial or child_scope
        if partial is not None:
            return Match.PARTIAL, partial
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        route: BaseRoute = scope["route"]
        await route.handle(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        # the routes themselves stay in the router: they answer for their names
        raise NoMatchFound(name, path_params)
