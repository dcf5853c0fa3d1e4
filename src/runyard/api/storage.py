"""Disk space at the API edge: what ``/health`` says about it, and 507 answers.

``/health`` keeps its seed shape ``{"answer": {"running": true, ...}, "success": true,
"metadata": {}}`` and adds ``storage``: free MB under the workspace, the ``min_free_mb``
guard, ``low`` (new work is being refused) and ``unwritten`` (final statuses a full disk
keeps in memory until space is freed).

Creation refused for lack of space (:class:`InsufficientStorage`) answers HTTP 507, by its
row in :mod:`runyard.api.errormap`: on the Job API with the Job envelope (``success:
false``, ``"OSError: ..."`` in ``answer``), because nothing ran and the caller must act
(free space) — unlike a task that fails while running, which is HTTP 200 ``success:
false``; on ``/api/v1`` with ``{"error": {"code": "insufficient_storage", "message": ...}}``.
"""

from __future__ import annotations

from typing import Any

from runyard.api.services import Services
from runyard.workspace.space import storage_report


def health_answer(services: Services) -> dict[str, Any]:
    storage = storage_report(services.workspace.root, services.settings.min_free_mb)
    storage["unwritten"] = services.supervisor.unwritten_count()
    return {"running": True, "storage": storage}
