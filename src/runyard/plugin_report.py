"""The answer of ``GET /api/v1/plugins`` and ``POST /api/v1/plugins/rescan``: which tasks a
server can run, which plugins did not load and why, and which need a restart.

It imports nothing else of runyard, so the client reads it without loading the server.

>>> PluginReport(tasks=["demo"]).model_dump()
{'tasks': ['demo'], 'added': [], 'plugin_errors': {}, 'restart_required': {}}
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class PluginReport(BaseModel):
    tasks: list[str] = Field(description="The task names the server can run, sorted")
    added: list[str] = Field(
        default_factory=list, description="Tasks this rescan found (empty for a plain read)"
    )
    plugin_errors: dict[str, str] = Field(
        default_factory=dict, description="Entry point name -> why that plugin did not load"
    )
    restart_required: dict[str, str] = Field(
        default_factory=dict,
        description="Task name -> one sentence on the change only a server restart brings in",
    )
