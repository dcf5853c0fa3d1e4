"""``runyard kubernetes``: what a cluster needs to run runyard, printed, never applied.

``runyard kubernetes manifests`` prints the Namespace, ServiceAccount, Role, RoleBinding,
PVC, Deployment and Service as multi-document YAML for ``kubectl apply -f -``.
``runyard kubernetes job TASK key=value…`` prints the Job (and what it owns) a submit of
that task would create on Kubernetes, with the settings in force (``kubernetes.*``, also
from ``RUNYARD_KUBERNETES__*``). Nothing contacts a cluster or writes a file. The builders
live in ``executors/kubernetes/`` and ``runtime/kubetasks.py`` and are imported when the
command runs (the CLI starts light).
"""

from __future__ import annotations

from typing import Annotated

import typer

from runyard.cli.common import ConfigOpt, LogDirOpt, WorkspaceOpt, fail, load_settings, parse_fields

app = typer.Typer(
    help="Deploy runyard on a Kubernetes cluster.", no_args_is_help=True, rich_markup_mode=None
)


@app.command()
def manifests(
    namespace: Annotated[str, typer.Option(help="Namespace of every object")] = "runyard",
    image: Annotated[
        str, typer.Option(help="runyard image (deploy/Dockerfile), for the server and runs")
    ] = "runyard:latest",
    storage_class: Annotated[
        str | None,
        typer.Option(help="StorageClass of the ReadWriteMany claim (default: the cluster's)"),
    ] = None,
    size: Annotated[str, typer.Option(help="Size of the workspace claim")] = "20Gi",
    name: Annotated[
        str, typer.Option(help="Name of the Deployment, Service and others")
    ] = "runyard",
    port: Annotated[int, typer.Option(help="Port the server listens on")] = 8765,
    token_secret: Annotated[
        str, typer.Option(help="Existing Secret holding the server token under key 'token'")
    ] = "runyard-token",
) -> None:
    """Print the YAML that deploys runyard (kubectl apply -f -)."""
    import re

    from runyard.executors.kubernetes.deployment import (
        DeployOptions,
        deployment_manifests,
        to_yaml,
    )
    from runyard.kubernetes_settings import K8S_NAME

    for label, value in (
        ("--namespace", namespace),
        ("--name", name),
        ("--token-secret", token_secret),
    ):
        if not re.match(K8S_NAME, value):
            typer.echo(f"Error: {label} {value!r} is not a Kubernetes name (a DNS label)", err=True)
            raise typer.Exit(2)
    options = DeployOptions(
        namespace=namespace,
        image=image,
        storage_class=storage_class,
        size=size,
        name=name,
        port=port,
        token_secret=token_secret,
    )
    typer.echo(to_yaml(deployment_manifests(options)), nl=False)


@app.command()
def job(
    task: Annotated[str, typer.Argument(help="Registered task name, e.g. demo")],
    fields: Annotated[
        list[str] | None, typer.Argument(help="Task inputs as key=value (JSON values)")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Fixed task name")] = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print the Job a submit of TASK would create on Kubernetes (kubectl apply -f -)."""
    from runyard.errors import RunyardError
    from runyard.executors.kubernetes.deployment import to_yaml
    from runyard.runtime.kubetasks import job_preview
    from runyard.tasks.registry import TaskRegistry
    from runyard.workspace.layout import Workspace

    settings = load_settings(workspace_dir, log_dir, config)
    inputs = parse_fields(fields or [])
    if name is not None:
        inputs["task_name"] = name
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    try:
        documents = job_preview(settings, workspace, TaskRegistry.load(), task, inputs)
    except RunyardError as exc:
        fail(str(exc))
    typer.echo(to_yaml(documents), nl=False)
