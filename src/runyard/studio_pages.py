"""Studio operations pages: ``studio: pages:`` in ``runyard.yaml``, AxonX 0.2.2's shape.

Example (AxonX's own default, which works here as it is)::

    studio:
      pages:
        online:
          title: {en: Online prediction, zh: 在线预测}
          view: pipeline          # schedules | tasks | pipeline
          category: online_prediction
        sync:
          title: {en: Synchronization, zh: 同步}
          view: schedules
          schedules: [workspace_sync]

Each page is an entry of the Studio's navigation, at ``#/pages/<id>``, and an item of the
``list_studio_pages`` job. The rules are AxonX's, checked when the settings load: an id is
a lowercase URL slug (so it can never be a ``javascript:`` or outside address), both
titles are given, a ``schedules`` page selects no category and the others need one.
This module names nothing of runyard beyond pydantic.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PAGE_ID = re.compile(r"[a-z][a-z0-9_-]*")
TaskCategory = Literal["data_update", "online_prediction", "comparison"]


class StudioPageConfig(BaseModel):
    """One page: its titles, the view it shows, and what that view selects."""

    model_config = ConfigDict(extra="forbid")

    title: dict[Literal["en", "zh"], str]
    view: Literal["schedules", "tasks", "pipeline"]
    schedules: list[str] = Field(default_factory=list)
    category: TaskCategory | None = None

    @model_validator(mode="after")
    def _check_page(self) -> Self:
        if set(self.title) != {"en", "zh"} or any(not t.strip() for t in self.title.values()):
            raise ValueError("Studio page titles require non-empty en and zh translations")
        if self.view == "schedules" and self.category is not None:
            raise ValueError("Schedule pages cannot select Tasks")
        if self.view != "schedules" and self.category is None:
            raise ValueError("Task pages require a TaskCategory")
        return self


class StudioPage(StudioPageConfig):
    """A page as ``list_studio_pages`` answers it: its config and its ``id``."""

    id: str


class StudioSettings(BaseModel):
    """The Studio's pages by id, in the order the config gives them."""

    model_config = ConfigDict(extra="forbid")

    pages: dict[str, StudioPageConfig] = Field(default_factory=dict)

    @field_validator("pages")
    @classmethod
    def _check_ids(cls, pages: dict[str, StudioPageConfig]) -> dict[str, StudioPageConfig]:
        bad = [name for name in pages if not PAGE_ID.fullmatch(name)]
        if bad:
            raise ValueError(
                f"Studio page IDs must be lowercase URL slugs ([a-z][a-z0-9_-]*): {bad[0]!r}"
            )
        return pages

    def listed(self) -> list[StudioPage]:
        """Every page with its id, in config order."""
        return [StudioPage(id=name, **page.model_dump()) for name, page in self.pages.items()]
