"""Task references: what a person may type where a full task id is asked for.

A reference is one of:

- a full id, ``base#demo#api-demo``, or the same with ``:`` for ``#`` (``base:demo:api-demo``,
  which needs no quoting in a shell and no ``%23`` in a URL). No part of an id may hold a
  ``:`` (task types are a fixed set, task and instance names are ``[A-Za-z0-9_-]``), so the
  two forms name the same task and answers always carry the canonical ``#`` form;
- a task's instance name alone, ``api-demo``;
- the name qualified by its task type or its registered task, ``base#api-demo`` or
  ``demo#api-demo`` (``:`` again allowed).

A full id is taken as it is (looking it up stays computing its path); the other forms are
matched against the ids the caller may see, and must name exactly one::

    >>> resolve_task_ref("demo:api-demo", ["base#demo#api-demo", "etl#load#api-demo"])
    'base#demo#api-demo'

None matching raises :class:`TaskNotFound`; more than one :class:`AmbiguousTaskId`, which
lists the full ids that match. ``visible`` is asked of each match before either is
decided, so a caller never learns of a task it may not see, not even its id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from runyard.errors import AmbiguousTaskId, InvalidTaskId, TaskNotFound
from runyard.workspace.identity import REG_NAME_RE, TASK_NAME_RE, is_task_id

SEPARATOR = "#"
URL_SEPARATOR = ":"
FORMS = (
    "use a full task id ('base#demo#api-demo', or 'base:demo:api-demo'), a task name "
    "('api-demo') or a name with its task type or task ('base:api-demo', 'demo:api-demo')"
)


def canonical_ref(ref: str) -> str:
    """``ref`` with ``:`` written as ``#`` (the one form answers carry)."""
    return ref.replace(URL_SEPARATOR, SEPARATOR)


def full_id_of(ref: object) -> str | None:
    """The full id ``ref`` spells (in either form), or None when it is not a full id."""
    if not isinstance(ref, str):
        return None
    task_id = canonical_ref(ref)
    return task_id if is_task_id(task_id) else None


def short_ref(ref: str) -> tuple[str, str | None]:
    """The instance name and the qualifier (a task type or task, or None) of the short
    reference ``ref``; :class:`InvalidTaskId` when ``ref`` is none of the forms."""
    parts = canonical_ref(ref).split(SEPARATOR)
    name = parts[-1]
    if len(parts) > 2 or not TASK_NAME_RE.fullmatch(name):
        raise InvalidTaskId(ref, FORMS)
    scope = parts[0] if len(parts) == 2 else None
    if scope is not None and not REG_NAME_RE.fullmatch(scope):
        raise InvalidTaskId(ref, FORMS)
    return name, scope


def matching_ids(ref: str, ids: Iterable[str]) -> list[str]:
    """The full ids among ``ids`` that the short reference ``ref`` names (a comprehension
    over the ids, then a look at the few that end with the name: about 0.2 µs an id)."""
    name, scope = short_ref(ref)
    ending = SEPARATOR + name
    found = [task_id for task_id in ids if task_id.endswith(ending)]
    if scope is None:
        return found
    return [task_id for task_id in found if scope in task_id.split(SEPARATOR)[:2]]


def resolve_task_ref(
    ref: object,
    known_ids: Iterable[str] | Callable[[], Iterable[str]],
    visible: Callable[[str], bool] | None = None,
) -> str:
    """The full id ``ref`` names (see the module docstring).

    ``known_ids`` are the ids to match a short reference against (or a callable that gives
    them, called only for a short reference); ``visible`` keeps those the caller may see.
    Raises :class:`InvalidTaskId`, :class:`TaskNotFound` or :class:`AmbiguousTaskId`.
    """
    if not isinstance(ref, str):
        raise InvalidTaskId(repr(ref), "a task id is a string")
    task_id = full_id_of(ref)
    if task_id is not None:
        return task_id
    short_ref(ref)  # a malformed reference fails before any id is listed
    found = matching_ids(ref, known_ids() if callable(known_ids) else known_ids)
    if visible is not None:
        found = [task_id for task_id in found if visible(task_id)]
    if not found:
        raise TaskNotFound(ref)
    if len(found) > 1:
        raise AmbiguousTaskId(ref, sorted(found))
    return found[0]
