"""Mount grants: host folders a session may mount, only inside ``allowed_mount_roots``.

A grant's host path is resolved (symlinks followed) when it is created and must then lie
inside a resolved allowed root; it is resolved again at each launch, so a folder swapped
for a symlink afterwards is refused then too.
"""

from __future__ import annotations

import os
from pathlib import Path

from runyard.agents.errors import AgentInvalid
from runyard.agents.models import Access


def resolve_grant_path(host_path: str, allowed_roots: list[Path]) -> Path:
    """The real folder ``host_path`` names; AgentInvalid when it is outside every root."""
    if not isinstance(host_path, str) or not host_path or "\x00" in host_path:
        raise AgentInvalid("hostPath must be a non-empty absolute path")
    if not os.path.isabs(host_path):
        raise AgentInvalid(f"hostPath {host_path!r} must be absolute")
    if not allowed_roots:
        raise AgentInvalid(
            "No mount grants are allowed: the server has no allowed_mount_roots configured"
        )
    real = Path(os.path.realpath(host_path))
    roots = [Path(os.path.realpath(root)) for root in allowed_roots]
    if not any(real == root or root in real.parents for root in roots):
        shown = ", ".join(str(root) for root in roots)
        via = f" (it resolves to {real})" if str(real) != os.path.normpath(host_path) else ""
        raise AgentInvalid(f"hostPath {host_path!r}{via} is outside the allowed roots: {shown}")
    if not real.is_dir():
        raise AgentInvalid(f"hostPath {host_path!r} is not an existing folder")
    return real


def check_still_granted(stored: str, allowed_roots: list[Path]) -> Path:
    """At launch: the grant's folder must still resolve to itself inside an allowed root."""
    real = resolve_grant_path(stored, allowed_roots)
    if str(real) != stored:
        raise AgentInvalid(f"Mount grant folder {stored} now resolves to {real}; grant it again")
    return real


def parse_access(value: object) -> Access:
    try:
        return Access(str(value)) if isinstance(value, str) else Access(repr(value))
    except ValueError as exc:
        raise AgentInvalid(f"access must be 'ro' or 'rw', got {value!r}") from exc
