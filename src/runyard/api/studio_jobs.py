"""``list_studio_pages``: AxonX 0.2.2's job, with its parameters (none) and answer.

The answer is the ``studio: pages:`` of the config (:mod:`runyard.studio_pages`), one
object per page in config order: ``id``, ``title`` (``en`` and ``zh``), ``view``,
``schedules`` and ``category``, as AxonX's ``StudioPage`` model dumps it. Pages are
navigation, not data: every caller may list them, a run token too.
"""

from __future__ import annotations

from runyard.api import job_args as a
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.studio_pages import StudioPage


class NoPageArguments(a.Strict):
    """No parameters, and none other accepted (AxonX: additionalProperties false)."""


async def _list_studio_pages(
    s: Services, args: NoPageArguments, hub: ChangeHub, scope: Scope
) -> JobResult:
    return [page.model_dump(mode="json") for page in s.settings.studio.listed()], True


LIST_STUDIO_PAGES = Job(
    "list_studio_pages",
    "List application-defined Studio operations pages.",
    NoPageArguments,
    list[StudioPage],
    _list_studio_pages,
)
