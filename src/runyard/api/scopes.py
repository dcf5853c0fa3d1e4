"""What a run token may see of the Task Job API: its own session's tasks, no host paths.

A request authenticated by the server token (admin) sees everything, unchanged. One
authenticated by an agent run's token (``request.state.run_scope``) sees only the tasks
its session submitted — the server's own record of the submitter decides
(:mod:`runyard.runtime.submitters`), not a status the task could rewrite — and every other
task answers exactly as a task that does not exist. Answers to it never carry the
workspace's or the logs' host paths::

    scope = request_scope(request)
    require_visible(services, task_id, scope)      # TaskNotFound for other sessions' tasks
    answer = scrub(services, answer, scope)        # log_path blanked, host paths removed
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from runyard.agents.models import RunScope
from runyard.api.services import Services
from runyard.errors import TaskNotFound
from runyard.repository.models import GraphNode, TaskContext, TaskGraph, TaskRelations
from runyard.repository.records import StatusRecord, status_json
from runyard.runtime.submitters import ADMIN, Submitter, run_submitter, session_of
from runyard.workspace.identity import parse_task_id

HIDDEN_PATH = "<hidden>"
PATH_FIELDS = frozenset({"log_path"})  # metadata_path is relative to the workspace

StatusFilter = Callable[[str, StatusRecord], bool]


def request_scope(request: Request) -> RunScope | None:
    """The run a request acts as, or None for the admin (server token or no auth)."""
    scope = request.scope.get("state", {}).get("run_scope")
    return scope if isinstance(scope, RunScope) else None


def submitter_for(scope: RunScope | None) -> Submitter:
    return ADMIN if scope is None else run_submitter(scope.session_id, scope.run_id)


def can_see(services: Services, task_id: str, scope: RunScope | None) -> bool:
    if scope is None:
        return True
    return session_of(services.workspace, task_id) == scope.session_id


def require_visible(services: Services, task_id: str, scope: RunScope | None) -> None:
    """Bad ids fail as always; another session's task fails as a missing one does."""
    parse_task_id(task_id)
    if not can_see(services, task_id, scope):
        raise TaskNotFound(task_id)


def visible_ids(services: Services, task_ids: list[str], scope: RunScope | None) -> list[str]:
    """The ids a scope may act on (all of them for the admin)."""
    if scope is None:
        return task_ids
    return [t for t in task_ids if _valid(t) and can_see(services, t, scope)]


def status_filter(services: Services, scope: RunScope | None) -> StatusFilter | None:
    """A test of index records that keeps only the scope's tasks (None: keep everything).

    The raw bytes are searched first; the server's record confirms each candidate.
    """
    if scope is None:
        return None
    needle = json.dumps(scope.session_id).encode()

    def keep(task_id: str, record: StatusRecord) -> bool:
        kept = status_json(record)  # None if damaged: can_see alone decides then
        return (kept is None or needle in kept) and can_see(services, task_id, scope)

    return keep


def scoped_graph(services: Services, graph: TaskGraph, scope: RunScope | None) -> TaskGraph:
    """The graph without other sessions' tasks: a parent it may not see is shown as a
    missing node (as one that does not exist), children it may not see are left out."""
    if scope is None:
        return graph
    seen = {n.task_id for n in graph.nodes if can_see(services, n.task_id, scope)}
    referenced = {parent for n in graph.nodes if n.task_id in seen for parent in n.parent_ids}
    nodes = []
    for node in graph.nodes:
        if node.task_id in seen:
            nodes.append(node)
        elif node.task_id in referenced:
            nodes.append(
                node.model_copy(
                    update={
                        "created_at": None,
                        "parent_ids": [],
                        "state": None,
                        "missing": True,
                        "provisional": False,
                    }
                )  # fmt: skip
            )
    edges = [e for e in graph.edges if e.to in seen]
    ordered = _ordered(nodes)
    return graph.model_copy(update={"nodes": ordered, "edges": edges, "root_id": _root(ordered)})


def scoped_context(services: Services, context: TaskContext, scope: RunScope | None) -> Any:
    """The context as a run token may see it: its graph scoped, relations recomputed on it."""
    if scope is None:
        return context.model_dump(mode="json", by_alias=True)
    graph = scoped_graph(services, context.graph, scope)
    nodes = {n.task_id: n for n in graph.nodes}
    selected = context.task_id
    relations = TaskRelations(
        direct_upstream=list(nodes[selected].parent_ids),
        ancestors=_ancestors(nodes, selected),
        direct_downstream=[n.task_id for n in graph.nodes if selected in n.parent_ids],
        missing=[n.task_id for n in graph.nodes if n.missing],
        provisional=[n.task_id for n in graph.nodes if n.provisional],
    )
    scoped = context.model_copy(update={"graph": graph, "relations": relations})
    return scrub(services, scoped.model_dump(mode="json", by_alias=True), scope)


def scrub(services: Services, answer: Any, scope: RunScope | None) -> Any:
    """``answer`` as a run token may see it: path fields blanked, host paths removed."""
    if scope is None:
        return answer
    prefixes = _host_prefixes(services)
    return _scrub(answer, prefixes)


def _scrub(value: Any, prefixes: list[str]) -> Any:
    if isinstance(value, dict):
        return {
            key: ("" if key in PATH_FIELDS and isinstance(item, str) else _scrub(item, prefixes))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_scrub(item, prefixes) for item in value]
    if isinstance(value, str):
        for prefix in prefixes:
            value = value.replace(prefix, HIDDEN_PATH)
    return value


def _host_prefixes(services: Services) -> list[str]:
    roots = {services.workspace.root, services.workspace.log_dir}
    found = {str(p) for p in roots} | {os.path.realpath(p) for p in roots}
    return sorted(found, key=len, reverse=True)  # the longest first: a nested one stays whole


def _ordered(nodes: list[GraphNode]) -> list[GraphNode]:
    present = [n for n in nodes if not n.missing]
    absent = sorted((n for n in nodes if n.missing), key=lambda n: n.task_id)
    return present + absent


def _root(ordered: list[GraphNode]) -> str:
    present = {n.task_id for n in ordered if not n.missing}
    for node in ordered:
        if not node.missing and not present.intersection(node.parent_ids):
            return node.task_id
    return ordered[0].task_id


def _ancestors(nodes: dict[str, GraphNode], selected: str) -> list[str]:
    found: list[str] = []
    seen = {selected}
    queue = deque(nodes[selected].parent_ids)
    while queue:
        task_id = queue.popleft()
        if task_id in seen:
            continue
        seen.add(task_id)
        found.append(task_id)
        queue.extend(nodes[task_id].parent_ids if task_id in nodes else ())
    return found


def _valid(task_id: str) -> bool:
    try:
        parse_task_id(task_id)
    except ValueError:
        return False
    return True
