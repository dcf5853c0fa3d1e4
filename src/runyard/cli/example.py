"""``runyard example research``: the research pipeline example, run end to end.

etl (a dataset bundled with scikit-learn) -> two train tasks (ridge, random forest) -> a
backtest of each -> one analysis report comparing them. Each stage names the previous one
in ``source_tasks``, so the lineage crosses the etl/, train/, backtest/ and analysis/
folders. The tasks come from the ``runyard-research`` plugin package
(``pip install -e examples/research``); the workspace's server runs them when one answers,
else they run here from the files. Progress bars follow every task; the Studio link of the
final task is printed last (never with a token in it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer

from runyard.cli.common import JsonOpt, console, fail, print_json
from runyard.cli.connect import with_backend

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from runyard.cli.backend import LocalBackend, RemoteBackend
    from runyard.workspace.records import TaskStatus

app = typer.Typer(
    help="Run the examples that ship with runyard.", no_args_is_help=True, rich_markup_mode=None
)

ETL, TRAIN, BACKTEST, REPORT = (
    "research_etl", "research_train", "research_backtest", "research_report",
)  # fmt: skip
MODELS: tuple[dict[str, Any], ...] = (
    {"model": "ridge", "alpha": 1.0},
    {"model": "random_forest", "n_estimators": 40, "max_depth": 5},
)
INSTALL_HINT = "install the example first: pip install -e examples/research"
POLL_SECONDS = 0.1

Submit = Callable[[str, dict[str, Any]], str]


@dataclass
class Stage:
    """Tasks that run side by side; each waits for the stage before it."""

    label: str
    task: str
    inputs: list[dict[str, Any]]


@dataclass
class PipelineRun:
    """Submits each stage, follows its tasks with one progress bar each."""

    submit: Submit
    status: Callable[[str], TaskStatus]
    progress: Progress
    done: dict[str, list[str]] = field(default_factory=dict)

    def run_stage(self, stage: Stage) -> list[str]:
        task_ids = [self.submit(stage.task, inputs) for inputs in stage.inputs]
        bars = {tid: self.progress.add_task(f"{stage.label:<9} {tid}", total=100)
                for tid in task_ids}  # fmt: skip
        finals = self._follow(bars)
        for status in finals:
            if status.state != "succeeded":
                fail(f"{status.task_id} {status.state}: {status.error or 'no error recorded'}")
        self.done[stage.label] = task_ids
        return task_ids

    def _follow(self, bars: dict[str, TaskID]) -> list[TaskStatus]:
        finals: dict[str, TaskStatus] = {}
        while len(finals) < len(bars):
            for task_id, bar in bars.items():
                if task_id in finals:
                    continue
                status = self.status(task_id)
                self.progress.update(bar, completed=overall(status))
                if status.terminal:
                    finals[task_id] = status
            if len(finals) < len(bars):
                time.sleep(POLL_SECONDS)
        return list(finals.values())


def overall(status: TaskStatus) -> float:
    """A run's progress: the mean of its steps', 100 when it ended well."""
    if status.state == "succeeded":
        return 100.0
    if not status.steps:
        return 0.0
    return sum(step.percentage for step in status.steps) / len(status.steps)


def run_pipeline(runner: PipelineRun, dataset: str) -> str:
    """Run etl -> train (each model) -> backtest (each) -> report; the report's id."""
    (etl,) = runner.run_stage(Stage("etl", ETL, [{"dataset": dataset}]))
    trains = runner.run_stage(
        Stage("train", TRAIN, [{**model, "source_tasks": etl} for model in MODELS])
    )
    backtests = runner.run_stage(
        Stage("backtest", BACKTEST, [{"source_tasks": train} for train in trains])
    )
    (report,) = runner.run_stage(Stage("analysis", REPORT, [{"source_tasks": ",".join(backtests)}]))
    return report


def studio_link(base_url: str, task_id: str) -> str:
    """The Studio's page of a task (its route ``#/tasks/<id>``, the id URL-encoded)."""
    return f"{base_url.rstrip('/')}/#/tasks/{quote(task_id, safe='')}"


def _remote_submit(backend: RemoteBackend) -> Submit:
    return lambda task, inputs: backend.client.submit(task, **inputs).task_id


def _local_submit(backend: LocalBackend) -> Submit:
    from runyard.runtime.launch import run_task
    from runyard.tasks.registry import TaskRegistry

    registry = TaskRegistry.load()

    def submit(task: str, inputs: dict[str, Any]) -> str:
        handle = run_task(backend.settings, backend.workspace, registry, task, inputs)
        return handle.task_id

    return submit


def _where(backend: RemoteBackend | LocalBackend) -> tuple[Submit, str, bool]:
    from runyard.cli.backend import RemoteBackend

    if isinstance(backend, RemoteBackend):
        return _remote_submit(backend), backend.client.url, True
    settings = backend.settings
    return _local_submit(backend), f"http://{settings.host}:{settings.port}", False


def _require_tasks(backend: RemoteBackend | LocalBackend) -> None:
    installed = {definition.name for definition in backend.definitions()}
    missing = [name for name in (ETL, TRAIN, BACKTEST, REPORT) if name not in installed]
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
    submit, base_url, served = _where(backend)
    percent = TextColumn("{task.percentage:>5.1f}%")
    columns = (TextColumn("{task.description}"), BarColumn(), percent)
    with Progress(*columns, console=console, transient=as_json) as progress:
        runner = PipelineRun(submit, backend.status, progress)
        report = run_pipeline(runner, dataset)
    link = studio_link(base_url, report)
    if as_json:
        print_json({"final_task": report, "tasks": runner.done, "studio_url": link,
                    "served": served})  # fmt: skip
        return
    console.print(f"Final task: [bold]{report}[/]", highlight=False)
    if not served:
        console.print("Ran from the files (no server answered); start `runyard serve` to open:")
    console.print(f"Studio: {link}", highlight=False, soft_wrap=True)
