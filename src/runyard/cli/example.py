"""``runyard example research``: the research pipeline example, run end to end.

The pipeline is ``runyard_research.pipeline`` of the ``runyard-research`` plugin package
(``pip install -e examples/research``): etl (a dataset bundled with scikit-learn) -> two
train tasks (ridge, random forest) -> a backtest of each -> one analysis report comparing
them, each step waiting for the ones it depends on, which are also its lineage, so it
crosses the etl/, train/, backtest/ and analysis/ folders. ``--dataset`` is the pipeline's
``dataset`` parameter. The workspace's server runs it when one answers (one pipeline run,
as ``runyard pipeline run`` makes); else a supervisor in this process runs it from the
files. Progress bars follow every step; the Studio link of the final task is printed last
(never with a token in it), after the link to the Studio's comparison of the trained
models (their params side by side, their metrics over the cross-validation folds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runyard.cli.common import JsonOpt, console, fail, print_json
from runyard.cli.connect import with_backend

if TYPE_CHECKING:
    from rich.progress import Progress

    from runyard.cli.backend import LocalBackend, RemoteBackend
    from runyard.client import Client
    from runyard.pipelines.build import Pipeline
    from runyard.workspace.records import TaskStatus

app = typer.Typer(
    help="Run the examples that ship with runyard.", no_args_is_help=True, rich_markup_mode=None
)

TASKS = ("research_etl", "research_train", "research_backtest", "research_report")
FINAL_STEP = "report"
INSTALL_HINT = "install the example first: pip install -e examples/research"
POLL_SECONDS = 0.1

Status = Callable[[str], "TaskStatus"]


def research_pipeline() -> Pipeline:
    """The example's pipeline object, from the installed example package."""
    try:
        from runyard_research.pipeline import pipe
    except ImportError:
        fail(f"the research pipeline is not installed: {INSTALL_HINT}")
    return pipe


def overall(status: TaskStatus) -> float:
    """A run's progress: the mean of its steps', 100 when it ended well."""
    if status.state == "succeeded":
        return 100.0
    if not status.steps:
        return 0.0
    return sum(step.percentage for step in status.steps) / len(status.steps)


def follow(progress: Progress, status: Status, task_ids: list[str]) -> list[TaskStatus]:
    """One progress bar a step (labelled with its task type) until every step ended; their
    final statuses, in the order given."""
    bars = {tid: progress.add_task(f"{tid.split('#')[0]:<9} {tid}", total=100) for tid in task_ids}
    finals: dict[str, TaskStatus] = {}
    while len(finals) < len(bars):
        for task_id, bar in bars.items():
            if task_id not in finals:
                now = status(task_id)
                progress.update(bar, completed=overall(now))
                if now.terminal:
                    finals[task_id] = now
        if len(finals) < len(bars):
            time.sleep(POLL_SECONDS)
    return [finals[task_id] for task_id in task_ids]


def studio_link(base_url: str, task_id: str, client: Client | None = None) -> str:
    """The Studio's page of a task (its route ``#/tasks/<id>``), a one-time login link to it
    where ``client`` holds the server token (:mod:`runyard.cli.studiolinks`)."""
    from runyard.cli import studiolinks

    return studiolinks.page_link(base_url, studiolinks.route("tasks", task_id), client)


def compare_link(base_url: str, task_ids: list[str], client: Client | None = None) -> str:
    """The Studio's compare view of ``task_ids`` (the trained models), a one-time login
    link to it where ``client`` holds the server token."""
    from runyard.cli import studiolinks

    return studiolinks.page_link(base_url, studiolinks.compare_route(task_ids), client)


@contextmanager
def started_run(
    backend: RemoteBackend | LocalBackend, pipe: Pipeline, dataset: str
) -> Iterator[tuple[dict[str, Any], str, bool]]:
    """Start the run on the server, else on a supervisor in this process (stopped when the
    block ends): the run, the Studio's base URL, and whether a server runs it."""
    from runyard.cli.backend import RemoteBackend

    if isinstance(backend, RemoteBackend):
        yield backend.client.run_pipeline(pipe, dataset=dataset), backend.client.url, True
        return
    from runyard.runtime.pipelines.runs import run_view, start_run
    from runyard.runtime.submitters import ADMIN
    from runyard.runtime.supervisor import Supervisor
    from runyard.tasks.registry import TaskRegistry

    settings = backend.settings
    supervisor = Supervisor(settings, backend.workspace, TaskRegistry.load())
    supervisor.start()
    try:
        run = start_run(supervisor, pipe.wire(dataset=dataset), ADMIN)
        yield run_view(backend.workspace, run), f"http://{settings.host}:{settings.port}", False
    finally:
        supervisor.stop()


def _require_tasks(backend: RemoteBackend | LocalBackend) -> None:
    installed = {definition.name for definition in backend.definitions()}
    missing = [name for name in TASKS if name not in installed]
    if missing:
        fail(f"the research tasks are not installed ({', '.join(missing)} missing): "
             f"{INSTALL_HINT}")  # fmt: skip


@app.command()
@with_backend
def research(
    backend: RemoteBackend | LocalBackend,
    dataset: Annotated[
        str, typer.Option(help="Dataset bundled with scikit-learn: diabetes or wine")
    ] = "diabetes",
    as_json: JsonOpt = False,
) -> None:
    """Run the research pipeline (etl, train, backtest, analysis); print the report's link."""
    from rich.progress import BarColumn, Progress, TextColumn

    _require_tasks(backend)
    pipe = research_pipeline()
    percent = TextColumn("{task.percentage:>5.1f}%")
    columns = (TextColumn("{task.description}"), BarColumn(), percent)
    with started_run(backend, pipe, dataset) as (run, base_url, served):
        steps = {step["key"]: step["task_id"] for step in run["steps"]}
        with Progress(*columns, console=console, transient=as_json) as progress:
            finals = follow(progress, backend.status, list(steps.values()))
    failed = next((s for s in finals if s.state != "succeeded"), None)
    if failed is not None:
        fail(f"{failed.task_id} {failed.state}: {failed.error or 'no error recorded'}")
    report = steps[FINAL_STEP]
    from runyard.cli.backend import RemoteBackend

    client = backend.client if isinstance(backend, RemoteBackend) else None
    link = studio_link(base_url, report, client)
    compare = compare_link(base_url, [t for key, t in steps.items() if key.startswith("train")],
                           client)  # fmt: skip
    if as_json:
        tasks: dict[str, list[str]] = {}
        for task_id in steps.values():
            tasks.setdefault(task_id.split("#")[0], []).append(task_id)
        print_json({"final_task": report, "tasks": tasks, "studio_url": link, "served": served,
                    "compare_url": compare, "pipeline_run": run["id"]})  # fmt: skip
        return
    console.print(f"Pipeline run: {run['id']}", highlight=False)
    console.print(f"Final task: [bold]{report}[/]", highlight=False)
    if not served:
        console.print("Ran from the files (no server answered); start `runyard serve` to open:")
    console.print(f"Compare the models: {compare}", highlight=False, soft_wrap=True)
    console.print(f"Studio: {link}", highlight=False, soft_wrap=True)
