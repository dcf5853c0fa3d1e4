"""``runyard backup create|verify|restore``: archives of a workspace and its logs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from runyard.cli.common import ConfigOpt, LogDirOpt, WorkspaceOpt, console, fail, load_settings
from runyard.errors import RunyardError

app = typer.Typer(
    help="Back up and restore a workspace and its logs.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

FileArg = Annotated[Path, typer.Argument(help="The archive (.tar, or gzip with .tar.gz/.tgz)")]
NewWorkspaceOpt = Annotated[
    Path, typer.Option("--workspace-dir", help="Empty or new folder for the workspace")
]
NewLogDirOpt = Annotated[Path, typer.Option("--log-dir", help="Empty or new folder for the logs")]


@contextmanager
def _progress(label: str) -> Iterator[Callable[[str, int], None]]:
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn

    columns = (
        SpinnerColumn(),
        TextColumn(label),
        DownloadColumn(),
        TextColumn("{task.fields[name]}"),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task(label, total=None, name="")

        def advance(name: str, size: int) -> None:
            progress.update(bar, advance=size, name=name[-60:])

        try:
            yield advance
        except RunyardError as exc:
            progress.stop()
            fail(str(exc))


@app.command()
def create(
    file: FileArg,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Archive the workspace and its logs; safe while the server runs."""
    from runyard.backup import create_backup

    settings = load_settings(workspace_dir, log_dir, config)
    with _progress("backing up") as advance:
        manifest = create_backup(settings.workspace_dir, settings.log_dir, file, advance)
    size = sum(entry.size for entry in manifest.files)
    console.print(
        f"wrote {file}: {len(manifest.files)} files, {size} bytes, "
        f"{len(manifest.running_tasks)} running task(s) captured, {len(manifest.skipped)} skipped"
    )


def _mount_roots(config: Path | None) -> list[Path]:
    """``allowed_mount_roots`` of the settings a server here would read (config, env)."""
    from runyard.config import Settings

    try:
        settings, _ = Settings.load_with_origins(config_file=config)
    except RunyardError as exc:
        fail(str(exc))
    return list(settings.allowed_mount_roots)


@app.command()
def verify(file: FileArg, config: ConfigOpt = None) -> None:
    """Re-check every file of an archive against its manifest, and its records: ids that
    are one path component, task records true to their folders, mount grants inside
    allowed_mount_roots."""
    from runyard.backup import verify_backup

    roots = _mount_roots(config)
    with _progress("verifying") as advance:
        manifest = verify_backup(file, advance, roots)
    console.print(
        f"{file} is intact: {len(manifest.files)} files match the manifest, its records are valid"
    )


@app.command()
def restore(
    file: FileArg, workspace_dir: NewWorkspaceOpt, log_dir: NewLogDirOpt, config: ConfigOpt = None
) -> None:
    """Restore an archive into empty or new folders; runs it interrupted become failed.
    An archive whose records fail verify's checks restores nothing."""
    from runyard.backup import restore_backup

    roots = _mount_roots(config)
    with _progress("restoring") as advance:
        manifest = restore_backup(file, workspace_dir, log_dir, advance, roots)
    console.print(
        f"restored {len(manifest.files)} files into {workspace_dir} and {log_dir}; "
        f"{len(manifest.running_tasks)} task(s) marked failed (interrupted)"
    )
