"""Lineage graph and task context (get_task_graph / get_task_context shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_metadata, put_status

from runyard.errors import InvalidTaskId, TaskNotFound
from runyard.repository import TaskRepository
from runyard.workspace import Workspace

A, B, C, D = (f"base#demo#{n}" for n in "abcd")
E = "etl#load#e"
GONE = "base#demo#gone"
LONER = "train#fit#loner"


def scanned(ws: Workspace) -> TaskRepository:
    repo = TaskRepository(ws)
    repo.start(watch=False)
    return repo


def diamond(ws: Workspace) -> None:
    """A -> B, A -> C, (B, C) -> D with metadata; E (status only) <- D and a deleted GONE."""
    put_status(ws, A, created=1)
    put_metadata(ws, A, created=1)
    for name, created in ((B, 2), (C, 3)):
        put_status(ws, name, created=created, sources=A)
        put_metadata(ws, name, created=created, sources=A)
    put_status(ws, D, created=4, sources=f"{C},{B}")
    put_metadata(ws, D, created=4, sources=f"{C},{B}")
    put_status(ws, E, state="running", created=5, sources=f"{D}, {GONE}")
    put_status(ws, LONER, created=0)


def test_graph_is_the_whole_connected_component(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    diamond(ws)
    repo = scanned(ws)
    for selected in (A, C, E):
        graph = repo.graph(selected)
        assert graph.selected_id == selected
        assert graph.root_id == A
        assert [n.task_id for n in graph.nodes] == [A, B, C, D, E, GONE]
    assert [(e.from_, e.to) for e in repo.graph(B).edges] == [
        (A, B),
        (A, C),
        (C, D),
        (B, D),
        (D, E),
        (GONE, E),
    ]
    assert [n.task_id for n in repo.graph(LONER).nodes] == [LONER]


def test_node_fields_missing_and_provisional(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    diamond(ws)
    nodes = {n.task_id: n for n in scanned(ws).graph(E).nodes}
    assert nodes[E].model_dump(mode="json") == {
        "task_id": E,
        "kind": "etl",
        "task_name": "load",
        "created_at": "2026-01-01T00:00:05.000000Z",
        "parent_ids": [D, GONE],
        "state": "running",
        "missing": False,
        "provisional": True,
    }
    assert nodes[GONE].model_dump(mode="json") == {
        "task_id": GONE,
        "kind": "base",
        "task_name": "demo",
        "created_at": None,
        "parent_ids": [],
        "state": None,
        "missing": True,
        "provisional": False,
    }
    assert nodes[D].parent_ids == [C, B] and not nodes[D].provisional


def test_metadata_parents_win_over_status_parents(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, A, created=1)
    put_status(ws, B, created=2)
    put_status(ws, C, created=3, sources=A)
    put_metadata(ws, C, created=3, sources=B)
    graph = scanned(ws).graph(C)
    assert [n.task_id for n in graph.nodes] == [B, C]
    assert graph.nodes[1].parent_ids == [B] and not graph.nodes[1].provisional


def test_metadata_only_node_is_succeeded(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_metadata(ws, A, created=1)
    put_status(ws, B, state="failed", created=2, sources=A)
    nodes = scanned(ws).graph(B).nodes
    assert [(n.task_id, n.state) for n in nodes] == [(A, "succeeded"), (B, "failed")]


def test_root_skips_a_deleted_upstream_and_survives_cycles(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, B, created=2, sources=GONE)
    put_status(ws, C, created=3, sources=B)
    put_status(ws, "etl#x#one", created=7, sources="etl#x#two")
    put_status(ws, "etl#x#two", created=8, sources="etl#x#one")
    repo = scanned(ws)
    assert repo.graph(C).root_id == B
    cycle = repo.graph("etl#x#two")
    assert cycle.root_id == "etl#x#one"
    assert [(e.from_, e.to) for e in cycle.edges] == [
        ("etl#x#two", "etl#x#one"),
        ("etl#x#one", "etl#x#two"),
    ]


def test_bad_source_entries_are_ignored_in_lineage(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, A, created=1)
    put_status(ws, B, created=2, sources=f"{B}, not-an-id,{A},{A},,base#demo#../x")
    put_status(ws, C, created=3)
    put_metadata(ws, C, created=3)
    meta = ws.metadata_path(C)
    meta.write_text(meta.read_text().replace('"source_tasks":""', '"source_tasks":[1,"' + A + '"]'))
    repo = scanned(ws)
    assert repo.graph(B).nodes[1].parent_ids == [A]
    assert repo.graph(C).nodes[-1].parent_ids == [A]


def test_graph_of_unknown_and_bad_ids(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, B, sources=GONE)
    repo = scanned(ws)
    with pytest.raises(TaskNotFound):
        repo.graph("base#demo#never")
    with pytest.raises(TaskNotFound):
        repo.graph(GONE)
    with pytest.raises(TaskNotFound):
        repo.context(GONE)
    with pytest.raises(InvalidTaskId):
        repo.graph("base#demo")


def test_graph_finds_a_task_written_after_the_scan(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    repo = scanned(ws)
    put_status(ws, A)
    assert repo.graph(A).root_id == A


def test_edges_are_from_and_to_on_the_wire(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, A, created=1)
    put_status(ws, B, created=2, sources=A)
    dumped = scanned(ws).graph(B).model_dump(mode="json")
    assert dumped["edges"] == [{"from": A, "to": B}]
    assert set(dumped) == {"root_id", "selected_id", "nodes", "edges"}


def test_context_of_a_single_queued_task_matches_the_protocol(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    task_id = "base#demo#api-demo"
    put_status(ws, task_id, state="queued", created=0)
    context = scanned(ws).context(task_id).model_dump(mode="json")
    assert context["status"]["state"] == "queued"
    context.pop("status")
    assert context == {
        "task_id": task_id,
        "metadata_exists": False,
        "metadata_path": "base/base#demo#api-demo/metadata.json",
        "log_path": None,
        "graph": {
            "root_id": task_id,
            "selected_id": task_id,
            "nodes": [
                {
                    "task_id": task_id,
                    "kind": "base",
                    "task_name": "demo",
                    "created_at": "2026-01-01T00:00:00.000000Z",
                    "parent_ids": [],
                    "state": "queued",
                    "missing": False,
                    "provisional": True,
                }
            ],
            "edges": [],
        },
        "relations": {
            "direct_upstream": [],
            "ancestors": [],
            "direct_downstream": [],
            "missing": [],
            "provisional": [task_id],
        },
    }


def test_context_relations_in_a_diamond(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    diamond(ws)
    put_status(ws, D, created=4, sources=f"{C},{B}", log_path="/logs/d.log")
    repo = scanned(ws)
    context = repo.context(D)
    assert context.metadata_exists and context.log_path == "/logs/d.log"
    assert context.status is not None and context.status.task_id == D
    assert context.relations.model_dump() == {
        "direct_upstream": [C, B],
        "ancestors": [C, B, A],
        "direct_downstream": [E],
        "missing": [GONE],
        "provisional": [E],
    }
    upstream = repo.context(E).relations
    assert upstream.ancestors == [D, GONE, C, B, A]
    assert repo.context(A).relations.direct_downstream == [B, C]


def test_context_of_a_metadata_only_task(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_metadata(ws, "predict#score#m", created=1)
    context = scanned(ws).context("predict#score#m")
    assert context.status is None and context.metadata_exists and context.log_path is None
    assert context.metadata_path == "predict/predict#score#m/metadata.json"
    assert context.graph.nodes[0].state == "succeeded"
