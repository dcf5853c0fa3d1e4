"""AxonX 0.2.2's workspace jobs against a real runyard server with auth on: ``list_entries``,
``list_task_runs``, ``preview_file`` and ``delete_entries`` through the real AxonX CLI, each
answer validated by AxonX's own models (``axonx.workspace.models``, imported in its venv),
and through runyard's own path: bad arguments, paths that try to leave the task folders
(``..``, absolute, a symlink out, runyard's state), an active task's folder, a run token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from runyard.runtime.submitters import record_submitter, run_submitter
from runyard.workspace.identity import TASK_TYPES
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus
from serverproc import ServerProcess, start_server, until

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)  # the first test builds the venv

TASK = "base#demo#files-a"
SECRET = "outside-secret-4711"
VALIDATE = """
import json, sys
from pydantic import TypeAdapter
from axonx.workspace import models as m
previews = {"text": m.TextPreview, "markdown": m.MarkdownPreview, "json": m.StructuredPreview,
            "yaml": m.StructuredPreview, "csv": m.CsvPreview, "jsonl": m.JsonlPreview,
            "parquet": m.ParquetPreview, "unsupported": m.UnsupportedPreview}
for kind, value in json.load(sys.stdin):
    if kind == "listing":
        m.WorkspaceListing.model_validate(value)
    elif kind == "deleted":
        TypeAdapter(list[m.DeletedEntry]).validate_python(value)
    else:
        previews[value["kind"]].model_validate(value)
        TypeAdapter(m.FilePreview).validate_python(value)
print("valid")
"""


def validate(*pairs: tuple[str, Any]) -> None:
    """Each ``(kind, answer)`` through AxonX's own pydantic models, in its venv."""
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", VALIDATE], input=json.dumps(pairs),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "valid", done.stderr


def finished(server: ServerProcess, name: str, task: str = "demo", **inputs: Any) -> str:
    extra = inputs or {"x": 1, "y": 2}
    handle = server.call("submit", task=task, task_name=name, **extra)["answer"]
    done = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"],
                       poll_interval=0.1)  # fmt: skip
    assert done["answer"]["state"] == "succeeded", done
    return str(handle["task_id"])


def task_folder(server: ServerProcess, task_id: str) -> Path:
    return server.workspace / task_id.split("#")[0] / task_id


def write_outputs(folder: Path, outside: Path) -> None:
    """What a task may leave in its folder: every preview kind, a hidden file, a symlink
    out of the workspace and a hard link to a file outside its folder."""
    (folder / "out").mkdir()
    (folder / "out" / "report.csv").write_text("a,b\n1,x\n2,y\n3,z\n")
    (folder / "notes.md").write_text("---\ntitle: Notes\n---\n# Body\n")
    (folder / "cfg.yaml").write_text("alpha: 1\nwhen: 2026-12-01\n")
    (folder / "bomb.yaml").write_text("a: &a [1, 1]\nb: [*a, *a]\n")
    (folder / "rows.jsonl").write_text('{"n": 1}\nnot json\n{"n": 3}\n')
    (folder / "plain.txt").write_text("hello " * 10)
    (folder / "blob.bin").write_bytes(b"\x00\x01")
    (folder / ".hidden.txt").write_text(SECRET)
    table = pa.table({"n": list(range(30)), "s": [f"r{i}" for i in range(30)]})
    pq.write_table(table, folder / "table.parquet", row_group_size=7)
    (folder / "escape").symlink_to(outside)
    (folder / "escape.txt").symlink_to(outside / "secret.txt")
    os.link(outside / "secret.txt", folder / "linked.txt")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("axonx-files")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    proc = start_server(root / "srv")
    try:
        write_outputs(task_folder(proc, finished(proc, "files-a")), outside)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def axonx(srv: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AxonX]:
    driver = AxonX(axonx_venv(), srv, tmp_path_factory.mktemp("axonx-cwd"))
    try:
        yield driver
    finally:
        driver.close()


def job(server: ServerProcess, name: str, **arguments: Any) -> httpx.Response:
    with server.client(60) as client:
        return client.post(f"/jobs/{name}", json={"arguments": arguments})


def names(listing: dict[str, Any]) -> set[str]:
    return {entry["name"] for entry in listing["entries"]}


def test_listing_through_the_axonx_cli(axonx: AxonX, srv: ServerProcess) -> None:
    """The root shows only the type folders, a type folder its task folders, a task folder
    what the task wrote (no hidden name); list_task_runs those with metadata.json."""
    root = axonx.ok("list_entries")["answer"]
    assert names(root) <= TASK_TYPES and "base" in names(root)
    assert root["path"] == "" and root["workspace_root"] == str(srv.workspace)
    base = axonx.ok("list_entries", "--path", "base")["answer"]
    assert TASK in names(base)
    inside = axonx.ok("list_entries", "--path", f"base/{TASK}")["answer"]
    kinds = {entry["name"]: entry["kind"] for entry in inside["entries"]}
    assert kinds["out"] == "directory" and kinds["escape"] == "symlink"
    assert kinds["table.parquet"] == "file" and ".hidden.txt" not in kinds
    assert inside["entries"][0]["name"] == "out"  # folders first, as AxonX sorts
    csv_entry = next(e for e in inside["entries"] if e["name"] == "status.json")
    assert csv_entry["preview_kind"] == "json" and csv_entry["supported"] is True
    paged = axonx.ok("list_entries", "--path", f"base/{TASK}", "--offset", "2")["answer"]
    assert paged["entries"] == inside["entries"][2:]
    runs = axonx.ok("list_task_runs", "--task-type", "base")["answer"]
    assert TASK in names(runs) and runs["path"] == "base"
    assert all(entry["kind"] == "directory" for entry in runs["entries"])
    validate(("listing", root), ("listing", base), ("listing", inside), ("listing", runs))


def test_a_task_folder_without_metadata_is_no_run(axonx: AxonX, srv: ServerProcess) -> None:
    """list_task_runs lists only task folders holding a metadata.json (a regular file)."""
    folder = srv.workspace / "etl" / "etl#load#bare"
    folder.mkdir()
    try:
        assert "etl#load#bare" in names(axonx.ok("list_entries", "--path", "etl")["answer"])
        assert "etl#load#bare" not in names(
            axonx.ok("list_task_runs", "--task-type", "etl")["answer"]
        )
    finally:
        folder.rmdir()


def test_previews_through_the_axonx_cli(axonx: AxonX) -> None:
    """Every kind, each answer validated by AxonX's model for it."""

    def show(name: str, *extra: str) -> dict[str, Any]:
        return axonx.ok("preview_file", "--path", f"base/{TASK}/{name}", *extra)["answer"]

    csv = show("out/report.csv", "--offset", "1", "--limit", "1")
    assert csv["columns"] == ["a", "b"] and csv["rows"] == [["2", "y"]] and csv["has_more"]
    md = show("notes.md")
    assert md["frontmatter"] == {"title": "Notes"} and md["content"] == "# Body\n"
    yml = show("cfg.yaml")
    assert yml["data"] == {"alpha": 1, "when": "2026-12-01"}
    bomb = show("bomb.yaml")
    assert bomb["data"] is None and "aliases" in bomb["parse_error"]
    rows = show("rows.jsonl", "--limit", "2")
    assert [r["data"] for r in rows["rows"]] == [{"n": 1}, None] and rows["has_more"]
    assert rows["rows"][1]["parse_error"]
    text = show("plain.txt", "--max-bytes", "6")
    assert text["content"] == "hello " and text["truncated"] is True
    status = show("status.json")
    assert status["data"]["task_id"] == TASK
    table = show("table.parquet", "--offset", "5", "--limit", "4")
    assert table["rows"] == [[5, "r5"], [6, "r6"], [7, "r7"], [8, "r8"]]
    assert table["row_count"] == 30 and table["row_group_count"] == 5 and table["has_more"]
    assert table["column_schema"][0] == {"name": "n", "type": "int64", "nullable": True}
    tail = show("table.parquet", "--offset", "28", "--limit", "5")
    assert tail["rows"] == [[28, "r28"], [29, "r29"]] and tail["has_more"] is False
    blob = show("blob.bin")
    assert blob == {"kind": "unsupported", "size": 2}
    answers = [csv, md, yml, bomb, rows, text, status, table, tail, blob]
    validate(*(("preview", answer) for answer in answers))


def test_deleting_through_the_axonx_cli(axonx: AxonX, srv: ServerProcess) -> None:
    """A file and a folder inside a finished task, then the task folder itself: through the
    supervisor, so the task is gone from the index and its logs go with it."""
    task_id = finished(srv, "files-del")
    folder = task_folder(srv, task_id)
    (folder / "sub").mkdir()
    (folder / "sub" / "x.txt").write_text("x")
    (folder / "y.txt").write_text("y")
    logs = srv.root / "logs" / "base" / task_id
    assert logs.is_dir()
    paths = [f"base/{task_id}/sub", f"base/{task_id}/sub/x.txt", f"base/{task_id}/y.txt"]
    deleted = axonx.ok("delete_entries", "--paths", json.dumps(paths))["answer"]
    assert deleted == [
        {"deleted": f"base/{task_id}/sub", "kind": "directory"},
        {"deleted": f"base/{task_id}/y.txt", "kind": "file"},
    ]
    assert not (folder / "sub").exists() and not (folder / "y.txt").exists()
    whole = axonx.ok("delete_entries", "--paths", json.dumps([f"base/{task_id}"]))["answer"]
    assert whole == [{"deleted": f"base/{task_id}", "kind": "directory"}]
    assert not folder.exists() and not logs.exists()
    assert task_id not in srv.call("list_task_ids")["answer"]
    validate(("deleted", deleted), ("deleted", whole))


ESCAPES = [
    "..", "../srv", "../outside/secret.txt", "/etc/passwd", "base/..", "base/../server.json",
    f"base/{TASK}/../../server.json", "server.json", "server.lock", "agent", "agent/state.db",
    ".history", ".idempotency", ".schedules", ".pipelines", ".taskcache", ".retrying",
    ".submitters", ".index", ".staging", ".claims", f"base/{TASK}/.hidden.txt",
    f"base/{TASK}/escape", f"base/{TASK}/escape/secret.txt", f"base/{TASK}/escape.txt",
    "base/base#demo#linked", "base/base#demo#linked/secret.txt", "base/notatask", "x\x00y",
    f"base/{TASK}\\..\\..\\server.json",
]  # fmt: skip


def test_paths_out_of_the_task_folders_are_refused(srv: ServerProcess) -> None:
    """Each job, given each escape (and the workspace's own absolute path), is refused: no
    listing, no content, nothing deleted; the targets are all still there."""
    outside = srv.root.parent / "outside"
    linked = srv.workspace / "base" / "base#demo#linked"
    linked.symlink_to(outside)  # a task folder swapped for a link out
    escapes = [*ESCAPES, str(srv.workspace / "base" / TASK / "plain.txt"), str(outside)]
    before = {p: p.read_bytes() for p in (outside / "secret.txt", srv.workspace / "server.json")}
    try:
        for path in escapes:
            for name, arguments in (
                ("list_entries", {"path": path}),
                ("preview_file", {"path": path}),
                ("delete_entries", {"paths": [path]}),
                ("delete_entries", {"paths": [f"base/{TASK}/plain.txt", path]}),
            ):
                reply = job(srv, name, **arguments)
                assert reply.status_code in (200, 400, 404), (path, reply.text)
                body = reply.json()
                assert body.get("success") is not True, (name, path, body)
                assert SECRET not in reply.text and '"token"' not in reply.text
            answer = job(srv, "list_task_runs", task_type=path)
            assert answer.status_code == 422 or answer.json()["success"] is False, answer.text
        for attempt in ("agent", "server.json", ".history"):
            reply = job(srv, "list_task_runs", task_type=attempt)
            assert reply.json().get("success") is not True, reply.text
    finally:
        linked.unlink()
    assert {p: p.read_bytes() for p in before} == before
    folder = srv.workspace / "base" / TASK
    for name in ("plain.txt", "linked.txt", "escape", "escape.txt", ".hidden.txt"):
        assert os.path.lexists(folder / name), name
    assert (srv.workspace / "agent").is_dir()


def test_hard_linked_file_and_records_are_refused(srv: ServerProcess) -> None:
    """A hard link to a file outside the task folder is never read; a task's records, the
    root and the type folders are never deleted one by one."""
    linked = job(srv, "preview_file", path=f"base/{TASK}/linked.txt")
    assert linked.json()["success"] is False and SECRET not in linked.text
    records = "a task's records go with its folder"
    runyards = "the workspace root and its type folders are runyard's"
    for path, reason in (
        (f"base/{TASK}/status.json", records), (f"base/{TASK}/metadata.json", records),
        (f"base/{TASK}/events.jsonl", records), ("base", runyards), ("etl", runyards),
        (".", runyards), ("base/", runyards),
    ):  # fmt: skip
        reply = job(srv, "delete_entries", paths=[path]).json()
        assert reply["success"] is False and reason in reply["answer"], (path, reply)
    assert job(srv, "delete_entries", paths=[""]).status_code == 422
    assert (srv.workspace / "base" / TASK / "status.json").is_file()
    assert srv.call("status", task_id=TASK)["answer"]["state"] == "succeeded"


def test_an_active_tasks_files_are_not_deleted(srv: ServerProcess) -> None:
    handle = srv.call("submit", task="command", task_name="files-busy",
                      command="sleep 60")["answer"]  # fmt: skip
    task_id = handle["task_id"]
    try:
        until(lambda: srv.call("status", task_id=task_id)["answer"]["state"] == "running")
        folder = task_folder(srv, task_id)
        (folder / "partial.txt").write_text("p")
        for path in (f"base/{task_id}", f"base/{task_id}/partial.txt"):
            reply = job(srv, "delete_entries", paths=[path])
            body = reply.json()
            assert reply.status_code in (200, 409) and body.get("success") is not True, body
            assert "still running" in json.dumps(body)
        assert (folder / "partial.txt").is_file()
        assert srv.call("status", task_id=task_id)["answer"]["state"] == "running"
    finally:
        srv.call("cancel", task_id=task_id)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("list_entries", {"offset": -1}),
        ("list_entries", {"path": 3}),
        ("list_entries", {"path": "", "more": 1}),
        ("list_task_runs", {}),
        ("list_task_runs", {"task_type": ""}),
        ("list_task_runs", {"task_type": "../base"}),
        ("preview_file", {}),
        ("preview_file", {"path": f"base/{TASK}/plain.txt", "limit": 0}),
        ("preview_file", {"path": f"base/{TASK}/plain.txt", "limit": 5001}),
        ("preview_file", {"path": f"base/{TASK}/plain.txt", "max_bytes": 0}),
        ("preview_file", {"path": f"base/{TASK}/plain.txt", "max_bytes": 33554433}),
        ("preview_file", {"path": f"base/{TASK}/plain.txt", "offset": -1}),
        ("delete_entries", {"paths": []}),
        ("delete_entries", {"paths": [""]}),
        ("delete_entries", {"paths": "base"}),
        ("delete_entries", {"paths": [f"base/{TASK}/x{i}" for i in range(201)]}),
    ],
)
def test_bad_arguments_are_422(srv: ServerProcess, name: str, arguments: dict[str, Any]) -> None:
    reply = job(srv, name, **arguments)
    assert reply.status_code == 422, reply.text
    assert (srv.workspace / "base" / TASK / "plain.txt").is_file()


def test_csv_rows_and_pages_are_bounded(srv: ServerProcess) -> None:
    """A task's CSV cannot make a preview hold an unbounded row (one long line, or small
    quoted fields across many lines) or answer an unbounded page."""
    folder = srv.workspace / "base" / TASK
    (folder / "long.csv").write_text("a\n" + "x" * (2 << 20) + "\n")
    (folder / "quoted.csv").write_text("a\n" + '"l\n",' * 400_000 + "z\n")
    (folder / "fat.csv").write_text("a\n" + (",".join(["y" * 1000] * 900) + "\n") * 20)
    for name in ("quoted.csv", "long.csv"):
        reply = job(srv, "preview_file", path=f"base/{TASK}/{name}").json()
        assert reply["success"] is False and "longer than 1048576" in reply["answer"], name
    page = job(srv, "preview_file", path=f"base/{TASK}/fat.csv", limit=20).json()["answer"]
    assert 8 <= len(page["rows"]) <= 10 and page["has_more"] is True
    later = job(srv, "preview_file", path=f"base/{TASK}/fat.csv", offset=18).json()["answer"]
    assert len(later["rows"]) == 2 and later["has_more"] is False


def test_structured_data_is_parsed_within_a_bound(srv: ServerProcess) -> None:
    """A JSON file of many small objects, a long YAML file or front matter, is answered as
    text, not parsed (its objects would take ten times its bytes; YAML's parser is slow)."""
    folder = srv.workspace / "base" / TASK
    (folder / "many.json").write_text("[" + "{}," * (2 << 20) + "{}]")
    (folder / "front.md").write_text("---\n" + "k: v\n" * (60 << 10) + "---\nbody\n")
    (folder / "big.yaml").write_text("".join(f"k{i}: v\n" for i in range(40_000)))
    many = job(srv, "preview_file", path=f"base/{TASK}/many.json").json()["answer"]
    assert many["data"] is None and "Not parsed" in many["parse_error"]
    assert len(many["content"]) == 3 * (2 << 20) + 4
    front = job(srv, "preview_file", path=f"base/{TASK}/front.md", max_bytes=8 << 20).json()
    assert front["answer"]["frontmatter"] is None and front["answer"]["content"] == "body\n"
    assert "not parsed" in front["answer"]["frontmatter_error"]
    big = job(srv, "preview_file", path=f"base/{TASK}/big.yaml").json()["answer"]
    assert big["data"] is None and "at most 262144 characters of yaml" in big["parse_error"]


def test_a_parquet_page_past_the_window_is_refused(srv: ServerProcess) -> None:
    reply = job(srv, "preview_file", path=f"base/{TASK}/table.parquet", offset=4999, limit=2)
    assert reply.json()["success"] is False and "at most 5000" in reply.text


def _seed_task(workspace: Path, task_id: str, session_id: str, run_id: str) -> Path:
    """A finished task of ``session_id``, as the server writes one, with a file of its own."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    task_type, task, name = task_id.split("#")
    status = TaskStatus(
        task_id=task_id, run_id="a" * 32, task_type=task_type, task_name=task,
        state="succeeded", config={"task_name": name}, created_at="2026-12-01T00:00:00Z",
        submitted_by=run_submitter(session_id, run_id),
    )  # fmt: skip
    record_submitter(ws, task_id, status.run_id, run_submitter(session_id, run_id))
    staging = workspace / ".seed" / task_id
    staging.mkdir(parents=True)
    (staging / "status.json").write_text(json.dumps(status.to_json()))
    (staging / "metadata.json").write_text("{}")
    (staging / "mine.txt").write_text(f"of {session_id}")
    (staging / "where.txt").write_text(f"written in {workspace}")
    staging.rename(ws.task_dir(task_id))
    return ws.task_dir(task_id)


@pytest.mark.sandbox
@needs_bwrap
def test_a_run_token_sees_its_sessions_task_folders_only(tmp_path: Path) -> None:
    """The attacker is session A's run: it lists, previews and deletes, and must see only
    A's task folders, nothing of B's or the admin's, and delete nothing at all."""
    server = agent_server(tmp_path / "srv", "bwrap")
    try:
        with api(server, timeout=120) as client:
            session_a = new_session(client, "a")
            calls = [["hold", "GET", "release", None]]
            run = create_run(client, session_a, json.dumps(calls), package="scope_probe")
            token = wait_file(client, run["id"], "token").decode()
            try:
                _attack(server, session_a, run["id"], token)
            finally:
                release = server.workspace / "agent" / "session-state" / session_a
                (release / "release").touch()
                wait_run(client, run["id"], timeout=90)
    finally:
        server.stop()


def _attack(server: ServerProcess, session_a: str, run_a: str, token: str) -> None:
    mine = _seed_task(server.workspace, "etl#load#mine", session_a, run_a)
    theirs = _seed_task(server.workspace, "etl#load#theirs", "b" * 32, "c" * 32)
    admins = finished(server, "admins")
    until(lambda: server.call("status", task_id="etl#load#theirs")["success"])
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as run:

        def call(name: str, **arguments: Any) -> httpx.Response:
            return run.post(f"/jobs/{name}", json={"arguments": arguments})

        etl = call("list_entries", path="etl").json()["answer"]
        assert names(etl) == {"etl#load#mine"} and etl["workspace_root"] is None
        assert names(call("list_task_runs", task_type="etl").json()["answer"]) == {"etl#load#mine"}
        assert names(call("list_entries", path="base").json()["answer"]) == set()
        own = call("preview_file", path="etl/etl#load#mine/mine.txt").json()
        assert own["answer"]["content"] == f"of {session_a}"
        where = call("preview_file", path="etl/etl#load#mine/where.txt").json()["answer"]
        assert where["content"] == "written in <hidden>"
        status = call("preview_file", path="etl/etl#load#mine/status.json").json()["answer"]
        assert status["data"]["task_id"] == "etl#load#mine"
        assert str(server.workspace) not in json.dumps(status)
        for path in ("etl/etl#load#theirs", f"base/{admins}"):
            for reply in (call("list_entries", path=path),
                          call("preview_file", path=f"{path}/status.json")):  # fmt: skip
                assert reply.json().get("success") is not True, reply.text
                assert "of " + "b" * 32 not in reply.text
        for paths in (["etl/etl#load#mine"], ["etl/etl#load#mine/mine.txt"],
                      ["etl/etl#load#theirs"]):  # fmt: skip
            refused = call("delete_entries", paths=paths)
            assert refused.status_code == 403, refused.text
    assert (mine / "mine.txt").is_file() and (theirs / "mine.txt").is_file()
