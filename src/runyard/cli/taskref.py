"""Task references on the command line: ``runyard status api-demo`` as well as the full id.

Every command that takes a task id (an argument named ``task_id`` or ``task_ids``) takes
any reference :mod:`runyard.workspace.lookup` accepts: the full id with ``#`` or ``:``
(``base:demo:api-demo`` needs no quoting), the task's name, or ``type:name``/``task:name``.
:func:`resolved_refs` turns them into full ids before the command runs, so what it prints
names the task in full. With a server the server resolves (its answer carries the full
id), and a run token would see only its own session's tasks there; without one the
workspace's index does. Imports are made when a command runs: the CLI starts without them.
"""

from __future__ import annotations

from typing import Any

from runyard.errors import AmbiguousTaskId, HTTPError

AMBIGUOUS = 409


def resolved_refs(made: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of a command with its ``task_id``/``task_ids`` made full ids, looked up
    through ``made`` (a backend or a client). Raises what the lookup raises."""
    if isinstance(kwargs.get("task_id"), str):
        kwargs = {**kwargs, "task_id": resolve(made, kwargs["task_id"])}
    if isinstance(kwargs.get("task_ids"), list):
        kwargs = {**kwargs, "task_ids": [resolve(made, ref) for ref in kwargs["task_ids"]]}
    return kwargs


def resolve(made: Any, ref: str) -> str:
    """The full id ``ref`` names: a full id at once, a short one through ``made``."""
    from runyard.workspace.lookup import full_id_of

    task_id = full_id_of(ref)
    if task_id is not None:
        return task_id
    from runyard.cli.backend import LocalBackend, RemoteBackend

    if isinstance(made, LocalBackend):
        return resolve_in_files(made, ref)
    return resolve_on_server(made.client if isinstance(made, RemoteBackend) else made, ref)


def resolve_in_files(backend: Any, ref: str) -> str:
    """``ref`` matched among the tasks of the workspace's index (no server)."""
    from runyard.workspace.lookup import resolve_task_ref

    return resolve_task_ref(ref, backend.repository.list_ids)


def resolve_on_server(client: Any, ref: str) -> str:
    """``ref`` as the server resolves it: its status answer names the task in full."""
    try:
        return str(client.status(ref).task_id)
    except HTTPError as exc:
        if exc.status_code == AMBIGUOUS:  # the server's sentence lists the full ids
            raise AmbiguousTaskId(ref, [], str(exc.detail)) from exc
        raise


def resolved_sources(place: Any, sources: str | None) -> str | None:
    """``--source`` of a task run here: each entry a full id, names matched in the
    workspace's index (an entry that is no reference is left to the task's own refusal)."""
    if not sources:
        return sources
    from runyard.workspace.lookup import full_id_of

    entries = [entry.strip() for entry in sources.split(",") if entry.strip()]
    if all(full_id_of(entry) is not None for entry in entries):
        return ",".join(full_id_of(entry) or entry for entry in entries)
    from runyard.cli.backend import LocalBackend
    from runyard.errors import InvalidTaskId

    backend = LocalBackend(place)
    resolved = []
    for entry in entries:
        try:
            resolved.append(resolve(backend, entry))
        except InvalidTaskId:
            resolved.append(entry)
    return ",".join(resolved)
