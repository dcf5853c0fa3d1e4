"""Ids of the agent-run backend: sessions, runs, artifacts and mount grants.

Each names one folder or file (``workspaces/<run-id>/``, ``session-state/<session-id>/``,
``snapshots/<session-id>/<run-id>/``), so each is one path component: 1-64 letters,
digits, ``_`` or ``-`` — the rule of task run ids too. runyard makes them as
``<kind>-<ms since 1970, hex>-<8 hex>`` (:func:`runyard.agents.models.new_id`); an id that
breaks the rule (``..``, ``a/b``, a NUL, empty, too long) is refused wherever it is read:
a request, a stored record, a restored backup.

>>> check_agent_id("ses-0193f2c4a1b2-9f3e1c7a", "session")
'ses-0193f2c4a1b2-9f3e1c7a'
>>> is_agent_id("../../x")
False
"""

from __future__ import annotations

import re

from runyard.agents.errors import InvalidAgentId
from runyard.wire import RUN_ID_PATTERN

AGENT_ID_RE = re.compile(RUN_ID_PATTERN)
AGENT_ID_RULE = "an id is 1-64 letters, digits, '_' or '-'"
# an upload's file name: ``<artifact-id>-<sanitized name>`` (placement_name), never hidden
STORED_NAME_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}$")
STORED_NAME_RULE = "a stored file name is 1-255 of [A-Za-z0-9._-], not starting with '.'"


def is_agent_id(value: object) -> bool:
    return isinstance(value, str) and AGENT_ID_RE.fullmatch(value) is not None


def check_agent_id(value: object, kind: str) -> str:
    """``value`` when it is a valid id; :class:`InvalidAgentId` (HTTP 422) otherwise."""
    if not is_agent_id(value):
        raise InvalidAgentId(kind, value, AGENT_ID_RULE)
    return value  # type: ignore[return-value]


def is_stored_name(value: object) -> bool:
    return isinstance(value, str) and STORED_NAME_RE.fullmatch(value) is not None


def check_stored_name(value: object) -> str:
    if not is_stored_name(value):
        raise InvalidAgentId("stored upload", value, STORED_NAME_RULE)
    return value  # type: ignore[return-value]
