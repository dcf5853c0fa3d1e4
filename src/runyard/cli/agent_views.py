"""How ``runyard agent`` shows the API's records: tables and plain lines (``--json`` prints
the records as the API answers them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.cli.common import console, print_json
from runyard.cli.render import state_text


def show(data: Any, as_json: bool, render: Any = None) -> None:
    """``data`` as JSON with ``--json`` (or without a renderer), else ``render(data)``."""
    if as_json or render is None:
        print_json(data)
    else:
        render(data)


# columns whose cells are ids (never cut: agent fork and the rest take them pasted) and
# columns of short values kept on one line; the others wrap at words (cli/tables.py)
ID_COLUMNS = frozenset({"id", "run", "latest run"})
SHORT_COLUMNS = frozenset({
    "status", "state", "turns", "isolation", "exit", "created", "files", "bytes", "skipped",
    "size", "access", "revoked", "version", "default", "type",
})  # fmt: skip


def table(columns: list[str], rows: list[list[Any]], wide: bool = False) -> None:
    from runyard.cli.tables import Column, grid, print_table

    shape = [
        Column(c, is_id=c in ID_COLUMNS, whole=c in SHORT_COLUMNS, markup=c == "state")
        for c in columns
    ]
    print_table(grid(shape, rows, boxed=True), wide=wide)


def sessions_table(page: dict[str, Any], wide: bool = False) -> None:
    rows = [
        [s["id"], s["title"], s["status"], len(s["history"]), s["latestRunId"]]
        for s in page["items"]
    ]
    table(["id", "title", "status", "turns", "latest run"], rows, wide)


def session_view(session: dict[str, Any]) -> None:
    console.print(f"[bold]{session['id']}[/] {session['title']!r} {session['status']}")
    origin = session.get("forkedFrom")
    if origin:
        console.print(f"forked from {origin['sessionId']} at run {origin['runId']}")
    for turn in session["history"]:
        head = f"[bold]{turn['role']}[/] ({turn['runId']}):"
        console.print(head, turn["content"], highlight=False)


def runs_table(page: dict[str, Any], wide: bool = False) -> None:
    rows = [
        [r["id"], state_text(r["state"]), r["package"], r["isolation"], r["exitCode"], r["error"]]
        for r in page["items"]
    ]
    table(["id", "state", "package", "isolation", "exit", "error"], rows, wide)


def checkpoints_table(page: dict[str, Any], wide: bool = False) -> None:
    rows = [
        [c["runId"], c["createdAt"], c["files"], c["bytes"], len(c.get("skipped", []))]
        for c in page["items"]
    ]
    table(["run", "created", "files", "bytes", "skipped"], rows, wide)


def saved(output: Path, as_json: bool) -> None:
    written = {"output": str(output), "size": output.stat().st_size}
    show(written, as_json, lambda s: print(f"{s['output']} ({s['size']} bytes)"))


def print_ended(run: dict[str, Any], answer: str | None) -> None:
    print(f"{run['id']} {run['state']}")
    if answer is not None:  # plain text: Markdown as written, no markup interpreted
        print()
        print(answer.rstrip("\n"))
