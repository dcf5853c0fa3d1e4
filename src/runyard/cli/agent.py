"""``runyard agent ...``: the agent-run API over HTTP (sessions, uploads, grants, runs,
checkpoints).

The server is ``--url``/``RUNYARD_URL``, else the address the workspace's server recorded;
the token ``--token``/``RUNYARD_TOKEN``, else the configured one, else the one that server
recorded. ``--json`` prints the
API's JSON as is.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from runyard.cli.agent_api import AgentApi, open_api
from runyard.cli.agent_views import (
    checkpoints_table,
    print_ended,
    runs_table,
    saved,
    session_view,
    sessions_table,
    show,
    table,
)
from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    WorkspaceOpt,
    console,
)
from runyard.cli.render import state_text
from runyard.cli.tables import WideOpt

app = typer.Typer(
    name="agent",
    help="Agent runs: sessions, uploads, mount grants, runs.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
SessionOpt = Annotated[str, typer.Option("--session", "-s", help="Session id")]
RunArg = Annotated[str, typer.Argument(help="Run id")]
TimeoutOpt = Annotated[
    float | None,
    typer.Option("--timeout", min=0, help="Give up after SECONDS: exit 124, the run keeps running"),
]
TERMINAL = ("succeeded", "failed", "cancelled")


def _waited(run_id: str, follow: Callable[[], Any], timeout: float | None) -> Any:
    """``follow()`` as a wait on ``run_id``: Ctrl-C (130) and ``timeout`` (124) say the run
    goes on and how to cancel it; a lost server says it may go on."""
    from runyard.cli.interrupt import bounded_wait

    return bounded_wait(
        run_id, follow, timeout,
        cancel=f"runyard agent cancel {run_id}", status=f"runyard agent run-info {run_id}",
    )  # fmt: skip


@app.command()
def sessions(
    as_json: JsonOpt = False, limit: int | None = None, cursor: str | None = None,
    wide: WideOpt = False,
    url: UrlOpt = None, token: TokenOpt = None, workspace_dir: WorkspaceOpt = None,
    config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List sessions, newest first."""
    params = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
    page = open_api(url, token, workspace_dir, config).call("GET", "/sessions", params=params)
    show(page, as_json, lambda listed: sessions_table(listed, wide))


@app.command("create-session")
def create_session(
    title: Annotated[str | None, typer.Option(help="A title")] = None, as_json: JsonOpt = False,
    url: UrlOpt = None, token: TokenOpt = None, workspace_dir: WorkspaceOpt = None,
    config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Create a session and print it (its id on its own without --json)."""
    api = open_api(url, token, workspace_dir, config)
    session = api.call("POST", "/sessions", json={"title": title})
    show(session, as_json, lambda s: print(s["id"]))


@app.command()
def session(
    session_id: Annotated[str, typer.Argument(help="Session id")], as_json: JsonOpt = False,
    url: UrlOpt = None, token: TokenOpt = None, workspace_dir: WorkspaceOpt = None,
    config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Show a session with its history."""
    found = open_api(url, token, workspace_dir, config).call("GET", f"/sessions/{session_id}")
    show(found, as_json, session_view)


def _status_command(action: str) -> Any:
    def command(
        session_id: Annotated[str, typer.Argument(help="Session id")], as_json: JsonOpt = False,
        url: UrlOpt = None, token: TokenOpt = None, workspace_dir: WorkspaceOpt = None,
        config: ConfigOpt = None,
    ) -> None:  # fmt: skip
        api = open_api(url, token, workspace_dir, config)
        found = api.call("POST", f"/sessions/{session_id}/{action}")
        show(found, as_json, lambda s: print(f"{s['id']} {s['status']}"))

    command.__doc__ = f"{action.title()} a session."
    return command


app.command("close")(_status_command("close"))
app.command("reopen")(_status_command("reopen"))
SessionArg = Annotated[str, typer.Argument(help="Session id")]


@app.command()
def checkpoints(
    session_id: SessionArg, as_json: JsonOpt = False, limit: int | None = None,
    cursor: str | None = None, wide: WideOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List a session's checkpoints (state snapshots after each run), newest first."""
    page = open_api(url, token, workspace_dir, config).checkpoints(session_id, limit, cursor)
    show(page, as_json, lambda listed: checkpoints_table(listed, wide))


@app.command()
def fork(
    session_id: SessionArg, run_id: RunArg,
    title: Annotated[str | None, typer.Option(help="The new session's title")] = None,
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Fork a new session from the checkpoint of RUN (prints the new session's id)."""
    forked = open_api(url, token, workspace_dir, config).fork(session_id, run_id, title)
    show(forked, as_json, lambda s: print(s["id"]))


@app.command()
def restore(
    session_id: SessionArg, run_id: RunArg, as_json: JsonOpt = False, url: UrlOpt = None,
    token: TokenOpt = None, workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Reset the session's state folder to the checkpoint of RUN, for its next run."""
    found = open_api(url, token, workspace_dir, config).restore(session_id, run_id)
    show(found, as_json, lambda s: print(f"{s['id']} state restored to {run_id}"))


@app.command()
def upload(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="File to upload")],
    session_id: SessionOpt,
    path: Annotated[str | None, typer.Option("--path", help="relativePath under in/")] = None,
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Upload a file into a session (streamed)."""
    api = open_api(url, token, workspace_dir, config)
    data = {"sessionId": session_id, **({"relativePath": path} if path else {})}
    with open(file, "rb") as fh:
        files = {"file": (file.name, fh)}
        artifact = api.call("POST", "/artifacts/upload", data=data, files=files, timeout=None)
    show(artifact, as_json, lambda a: print(a["id"]))


@app.command()
def artifacts(
    session_id: SessionOpt, as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List a session's uploaded artifacts."""
    api = open_api(url, token, workspace_dir, config)
    page = api.call("GET", "/artifacts", params={"sessionId": session_id, "limit": 1000})
    rows = [
        [a["id"], a["fileName"], a["relativePath"], a["size"], a["sha256"][:12]]
        for a in page["items"]
    ]
    show(page, as_json, lambda _: table(["id", "name", "relativePath", "size", "sha256"], rows))


@app.command()
def download(
    artifact_id: Annotated[str, typer.Argument(help="Artifact id")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write it")],
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Download an uploaded artifact."""
    api = open_api(url, token, workspace_dir, config)
    api.save(lambda agents, to: agents.download_artifact(artifact_id, to), output)
    saved(output, as_json)


@app.command()
def grant(
    session_id: SessionOpt,
    name: Annotated[str, typer.Option(help="Mounted at /workspace/mounts/<name>")],
    host_path: Annotated[str, typer.Option("--host-path", help="Folder inside an allowed root")],
    access: Annotated[str, typer.Option(help="ro or rw")] = "ro",
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Let a session mount a host folder."""
    body = {"sessionId": session_id, "name": name, "hostPath": host_path, "access": access}
    created = open_api(url, token, workspace_dir, config).call("POST", "/mount-grants", json=body)
    show(created, as_json, lambda g: print(g["id"]))


@app.command()
def grants(
    session_id: SessionOpt, as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List a session's mount grants."""
    api = open_api(url, token, workspace_dir, config)
    page = api.call("GET", "/mount-grants", params={"sessionId": session_id, "limit": 1000})
    rows = [[g["id"], g["name"], g["hostPath"], g["access"], g["revoked"]] for g in page["items"]]
    show(page, as_json, lambda _: table(["id", "name", "hostPath", "access", "revoked"], rows))


@app.command()
def revoke(
    grant_id: Annotated[str, typer.Argument(help="Mount grant id")], as_json: JsonOpt = False,
    url: UrlOpt = None, token: TokenOpt = None, workspace_dir: WorkspaceOpt = None,
    config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Revoke a mount grant."""
    api = open_api(url, token, workspace_dir, config)
    revoked = api.call("DELETE", f"/mount-grants/{grant_id}")
    show(revoked, as_json, lambda g: print(f"{g['id']} revoked"))


@app.command()
def run(
    session_id: SessionOpt,
    prompt: Annotated[str, typer.Argument(help="The user prompt")],
    system: Annotated[str | None, typer.Option(help="System prompt")] = None,
    artifact: Annotated[
        list[str] | None, typer.Option(help="Artifact id (repeat); default: all")
    ] = None,
    grant_id: Annotated[list[str] | None, typer.Option("--grant", help="Grant id (repeat)")] = None,
    package: Annotated[str | None, typer.Option(help="Agent package name")] = None,
    enqueue: Annotated[bool, typer.Option(help="Queue behind the session's active run")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends")] = False,
    timeout: TimeoutOpt = None,
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Start a run in a session."""
    api = open_api(url, token, workspace_dir, config)
    body: dict[str, Any] = {"sessionId": session_id, "userPrompt": prompt, "enqueue": enqueue}
    optional = {"systemPrompt": system, "artifactIds": artifact, "mountGrantIds": grant_id}
    body.update({k: v for k, v in {**optional, "package": package}.items() if v is not None})
    created = api.call("POST", "/runs", json=body)
    if not wait:
        show(created, as_json, lambda r: print(f"{r['id']} {r['state']}"))
        return
    run_id = created["id"]
    ended = _waited(run_id, lambda: _follow(api, run_id, as_json), timeout)
    text = answer_of(api, ended)
    show({**ended, "answer": text}, as_json, lambda r: print_ended(r, text))
    if ended["state"] != "succeeded":
        raise typer.Exit(1)


def answer_of(api: AgentApi, run: dict[str, Any]) -> str | None:
    """The run's answer as folded into its session's history (None when it wrote none).

    runyard folds it before the run reads as ended, so an ended run's answer is there.
    """
    found = api.call("GET", f"/sessions/{run['sessionId']}")
    for turn in reversed(found["history"]):
        if turn["role"] == "assistant" and turn.get("runId") == run["id"]:
            return str(turn["content"])
    return None


def _follow(api: AgentApi, run_id: str, as_json: bool) -> dict[str, Any]:
    for kind, data in api.stream(run_id):
        if kind == "log" and not as_json:
            console.print(data["content"], end="", highlight=False, markup=False)
        elif kind == "state" and not as_json:
            console.print(f"[dim]{run_id}[/] {state_text(data['state'])} {data['error']}")
        elif kind == "end":
            return data["run"]
    return api.call("GET", f"/runs/{run_id}")


@app.command()
def runs(
    session_id: Annotated[str | None, typer.Option("--session", "-s", help="Session id")] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Print state changes until idle")] = False,
    as_json: JsonOpt = False, wide: WideOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List runs (of one session); --watch follows them until none is active."""
    api = open_api(url, token, workspace_dir, config)
    params = {"limit": 1000, **({"sessionId": session_id} if session_id else {})}
    page = api.call("GET", "/runs", params=params)
    show(page, as_json, lambda listed: runs_table(listed, wide))
    if watch:
        _watch_runs(api, params, page, as_json)


def _watch_runs(api: AgentApi, params: dict[str, Any], page: dict[str, Any], as_json: bool) -> None:
    seen = {r["id"]: r["state"] for r in page["items"]}
    while any(state not in TERMINAL for state in seen.values()):
        time.sleep(0.5)
        for found in api.call("GET", "/runs", params=params)["items"][::-1]:
            if seen.get(found["id"]) != found["state"]:
                seen[found["id"]] = found["state"]
                if as_json:
                    print(json.dumps(found), flush=True)
                else:
                    console.print(f"{found['id']} {state_text(found['state'])} {found['error']}")


@app.command("run-info")
def run_info(
    run_id: RunArg, as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Show one run."""
    found = open_api(url, token, workspace_dir, config).call("GET", f"/runs/{run_id}")
    show(found, as_json, lambda r: runs_table({"items": [r]}))


@app.command()
def answer(
    run_id: RunArg, as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Print a run's answer (exit 1 when it has none, e.g. while it is still running)."""
    api = open_api(url, token, workspace_dir, config)
    text = answer_of(api, api.call("GET", f"/runs/{run_id}"))
    shown = {"runId": run_id, "answer": text}
    show(shown, as_json, lambda a: print((a["answer"] or "").rstrip("\n")))
    if text is None:
        if not as_json:
            print(f"run {run_id} has no answer yet", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
def cancel(
    run_id: RunArg, as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Cancel a run (its whole sandbox is stopped)."""
    found = open_api(url, token, workspace_dir, config).call("POST", f"/runs/{run_id}/cancel")
    show(found, as_json, lambda r: print(f"{r['id']} {r['state']}"))


@app.command()
def files(
    run_id: RunArg, as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List a run's output files."""
    page = open_api(url, token, workspace_dir, config).call("GET", f"/runs/{run_id}/files")
    rows = [[f["path"], f["size"], f["mediaType"]] for f in page["items"]]
    show(page, as_json, lambda _: table(["path", "size", "type"], rows))


@app.command()
def fetch(
    run_id: RunArg,
    path: Annotated[str, typer.Argument(help="Path under out/, e.g. final-answer.md")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default: stdout)")
    ] = None,
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Download one of a run's output files (to stdout without --output)."""
    api = open_api(url, token, workspace_dir, config)
    api.save(lambda agents, to: agents.download(run_id, path, to), output)
    if output is not None:
        saved(output, as_json)


@app.command()
def events(
    run_id: RunArg, timeout: TimeoutOpt = None, as_json: JsonOpt = False,
    url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """Follow a run's events (state changes and log) until it ends."""
    api = open_api(url, token, workspace_dir, config)
    if as_json:
        _waited(run_id, lambda: _print_events(api, run_id), timeout)
        return
    final = _waited(run_id, lambda: _follow(api, run_id, False), timeout)
    print(f"{final['id']} {final['state']}")


def _print_events(api: AgentApi, run_id: str) -> None:
    for kind, data in api.stream(run_id):
        print(json.dumps({"event": kind, "data": data}), flush=True)


@app.command()
def packages(
    as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None, config: ConfigOpt = None,
) -> None:  # fmt: skip
    """List the agent packages runs may name."""
    page = open_api(url, token, workspace_dir, config).call("GET", "/packages")
    rows = [
        [p["name"], p["version"], "yes" if p["default"] else "", p["description"]]
        for p in page["items"]
    ]
    show(page, as_json, lambda _: table(["name", "version", "default", "description"], rows))
