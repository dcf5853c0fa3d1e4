"""The installed distributions that register runyard tasks, in AxonX 0.2.2's ``PluginInfo``
shape: ``{distribution, version, plugins, tasks, components, jobs, requirements,
content_sha256, sha256, error}``.

A plugin is a distribution with at least one entry point in the ``runyard.tasks`` group;
``plugins`` and the keys of ``tasks`` are those entry points' names (the task names),
``tasks`` maps each to its ``module:Class``. runyard plugins contribute tasks only, so
``components`` and ``jobs`` are always empty. ``sha256`` is the wheel's hash when pip
recorded one (``direct_url.json``), ``error`` the registry's reasons its tasks did not
load, one line a task.

>>> find_plugin("no-such-plugin", {})
Traceback (most recent call last):
runyard.errors.InvalidInput: Unknown plugin: 'no-such-plugin' (list_plugins lists them)
"""

from __future__ import annotations

import json
from importlib.metadata import Distribution, distributions
from typing import Any

from packaging.utils import canonicalize_name

from runyard.errors import InvalidInput
from runyard.tasks.registry import ENTRY_POINT_GROUP


def list_plugins(errors: dict[str, str]) -> list[dict[str, Any]]:
    """Every plugin distribution installed, sorted by canonical name; ``errors`` is the
    registry's ``{task name: why it did not load}``."""
    found: dict[str, dict[str, Any]] = {}
    for dist in distributions():
        info = plugin_info(dist, errors)
        if info is not None:
            found.setdefault(canonicalize_name(info["distribution"]), info)
    return [found[key] for key in sorted(found)]


def find_plugin(name: str, errors: dict[str, str]) -> dict[str, Any]:
    """The one plugin whose distribution (compared canonically) or task name is ``name``;
    InvalidInput when none or several are."""
    wanted = canonicalize_name(name)
    matches = [
        info
        for info in list_plugins(errors)
        if canonicalize_name(info["distribution"]) == wanted or name in info["plugins"]
    ]
    if not matches:
        raise InvalidInput(f"Unknown plugin: {name!r} (list_plugins lists them)")
    if len(matches) > 1:
        names = ", ".join(info["distribution"] for info in matches)
        raise InvalidInput(f"Ambiguous plugin: {name!r} is a task of {names}")
    return matches[0]


def plugin_info(dist: Distribution, errors: dict[str, str]) -> dict[str, Any] | None:
    """``dist`` as a plugin, or None when it registers no runyard task."""
    points = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    name = dist.metadata["Name"] if dist.metadata is not None else None
    if not points or not name:
        return None
    tasks = {ep.name: ep.value for ep in sorted(points, key=lambda ep: ep.name)}
    failed = [f"{task}: {errors[task]}" for task in tasks if task in errors]
    return {
        "distribution": name,
        "version": dist.version or "",
        "plugins": list(tasks),
        "tasks": tasks,
        "components": {},
        "jobs": {},
        "requirements": list(dist.requires or []),
        "content_sha256": None,
        "sha256": _wheel_sha256(dist),
        "error": "\n".join(failed) or None,
    }


def _wheel_sha256(dist: Distribution) -> str | None:
    """The sha256 pip recorded for the archive it installed ``dist`` from, if any."""
    try:
        recorded = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    hashes = recorded.get("archive_info", {}) if isinstance(recorded, dict) else {}
    digest = hashes.get("hashes", {}).get("sha256") if isinstance(hashes, dict) else None
    if isinstance(digest, str) and len(digest) == 64:
        return digest.lower()
    return None
