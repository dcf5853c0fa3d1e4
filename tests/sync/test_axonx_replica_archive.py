"""AxonX 0.2.2 display-replica archives applied by ``sync_tasks``'s archive code into a
real workspace: one in AxonX's layout applies as a runyard task (records mapped, the log
placed, artifacts hashed as received); forged ones are refused whole, nothing applied and
no scratch left: links, ``..`` (also hidden behind the log's name), a record naming
another task, an unfinished task, a live snapshot, files that differ from the manifest,
a replica carrying runyard's own ``status.json``, and gzip bombs in a file and in the
metadata. The archives are written here as an attacker would, member by member."""

from __future__ import annotations

import copy
import gzip
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runyard.errors import InvalidInput
from runyard.sync.archive import apply_archive, index
from runyard.sync.errors import SyncRefused
from runyard.sync.receiver import ReceiveLimits
from runyard.workspace.layout import Workspace

TASK = "base#demo#peer-one"
FOLDER = f"base/{TASK}"
RUN = "0123456789abcdef0123456789abcdef"
LOG = b"line one\nline two\n"
RESULT = b'{"y": 3}'


def record(**changes: Any) -> dict[str, Any]:
    """AxonX's TaskMetadata of a finished task, as its sender writes it into a replica."""
    files = {
        "out/result.json": {"size": len(RESULT), "revision": "8:1:None", "sampled": False},
        "events.jsonl": {"size": 8, "revision": "8:2:None", "sampled": False},
        "display/log.log": {"size": len(LOG), "revision": f"0:{len(LOG)}:3", "sampled": False},
    }
    data: dict[str, Any] = {
        "task_id": TASK, "run_id": RUN, "task_type": "base", "reg_name": "demo",
        "state": "succeeded", "version": 1, "created_at": "2026-12-01T10:00:00Z",
        "started_at": "2026-12-01T10:00:01Z", "finished_at": "2026-12-01T10:00:05Z",
        "error": "", "exit_code": 0, "log_path": "", "input_params": {"x": 2},
        "output_params": {
            "y": 3,
            "artifacts": {"result": {"path": "out/result.json", "size": 8, "revision": "r"}},
        },
        "steps": [{"name": "fit", "state": "done", "percentage": None}],
        "replica": {
            "purpose": "display", "source_revision": "abc", "policy_revision": "p",
            "files": files, "omitted": {}, "source_log_path": "/peer/logs/x.log",
            "snapshot": None, "log": {"path": "display/log.log", "start": 0, "end": len(LOG)},
        },
    }  # fmt: skip
    data.update(changes)
    return data


def members(meta: dict[str, Any] | None = None) -> list[tuple[str, bytes]]:
    return [
        (f"{FOLDER}/display/log.log", LOG),
        (f"{FOLDER}/events.jsonl", b'{"e":1}\n'),
        (f"{FOLDER}/metadata.json", json.dumps(meta or record()).encode()),
        (f"{FOLDER}/out/result.json", RESULT),
    ]


def archive(
    path: Path, entries: list[tuple[str, bytes]], links: dict[str, str] | None = None
) -> Path:
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as out,
    ):
        for name, body in entries:
            member = tarfile.TarInfo(name)
            member.size = len(body)
            out.addfile(member, io.BytesIO(body))
        for name, target in (links or {}).items():
            member = tarfile.TarInfo(name)
            member.type = tarfile.SYMTYPE if target.startswith("/") else tarfile.LNKTYPE
            member.linkname = target
            out.addfile(member)
    path.write_bytes(raw.getvalue())
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path / "ws", tmp_path / "logs")
    ws.root.mkdir(parents=True)
    return ws


def apply(ws: Workspace, path: Path, max_bytes: int = 64 << 20) -> Any:
    return apply_archive(ws, path, [], ReceiveLimits(max_bytes, 0), list, lambda _: None, "a")


def test_an_axonx_replica_applies_as_a_runyard_task(workspace: Workspace, tmp_path: Path) -> None:
    report = apply(workspace, archive(tmp_path / "a.tar.gz", members()))
    assert report.applied == [FOLDER] and report.files == 4
    status = workspace.read_status(TASK)
    assert status is not None and status.state == "succeeded" and status.run_id == RUN
    assert status.config == {"x": 2} and status.result["y"] == 3
    artifact = status.result["artifacts"]["result"]
    assert artifact["size"] == len(RESULT) and len(artifact["sha256"]) == 64
    assert status.steps[0].name == "fit" and status.steps[0].percentage == 100.0
    extra = status.model_extra or {}
    assert extra["synced_from"]["peer"] == "axonx"
    assert workspace.run_log_path(TASK, RUN).read_bytes() == LOG
    folder = workspace.task_dir(TASK)
    assert (folder / "out" / "result.json").read_bytes() == RESULT
    assert not (folder / "display").exists()  # the log went to the run's log
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["reg_name"] == "demo" and "run_id" not in meta and "replica" not in meta
    held = index(workspace, frozenset(), 1 << 20)[TASK]
    assert held["run_id"] == RUN and held["source_revision"] == "abc"  # the sender's own


def test_a_sampled_artifact_is_marked_and_an_omitted_one_set_aside(
    workspace: Workspace, tmp_path: Path
) -> None:
    sample = b"day,score\n20261201,1\n"
    meta = record()
    meta["output_params"]["artifacts"].update(
        daily={"path": "daily.csv", "size": 90_000, "revision": "r"},
        big={"path": "big.parquet", "size": 1 << 30, "revision": "r"},
    )
    meta["replica"]["files"]["daily.csv"] = {"size": len(sample), "revision": "s", "sampled": True}
    meta["replica"]["omitted"] = {"big.parquet": "transfer budget"}
    apply(
        workspace, archive(tmp_path / "a.tar.gz", [*members(meta), (f"{FOLDER}/daily.csv", sample)])
    )
    status = workspace.read_status(TASK)
    assert status is not None
    daily = status.result["artifacts"]["daily"]
    assert daily["display"] == "sampled" and daily["source_size"] == 90_000
    assert daily["size"] == len(sample) and len(daily["sha256"]) == 64
    assert "big" not in status.result["artifacts"]
    assert status.result["omitted_artifacts"]["big"]["reason"] == "transfer budget"


def forged_cases() -> list[tuple[str, str, list[tuple[str, bytes]], dict[str, str]]]:
    other = record(task_id="base#demo#someone-else")
    running = record(state="running")
    live = record()
    live["replica"]["snapshot"] = {"source_id": "s", "root_task_id": TASK, "root_run_id": RUN,
                                   "captured_at": "2026-12-01T10:00:00Z", "revision": 1}  # fmt: skip
    sized = record()
    sized["replica"]["files"]["out/result.json"]["size"] = 999
    sneaky_log = copy.deepcopy(record())
    sneaky_log["replica"]["log"]["path"] = "../../../escape.log"
    sneaky_log["replica"]["files"]["../../../escape.log"] = {"size": 3, "revision": "r"}
    with_status = record()
    with_status["replica"]["files"]["status.json"] = {"size": 2, "revision": "r"}
    bad_run = record(run_id="../../x")
    log_range = record()
    log_range["replica"]["log"]["end"] = 999
    return [
        ("symlink", "not a file or folder", members(), {f"{FOLDER}/out/link": "/etc/passwd"}),
        (
            "hard link",
            "not a file or folder",
            members(),
            {f"{FOLDER}/out/hard": f"{FOLDER}/out/result.json"},
        ),
        ("dot-dot", "'..' components", [*members(), (f"{FOLDER}/../../escape.txt", b"x")], {}),
        (
            "dot-dot log",
            "'..' components",
            [*members(sneaky_log), (f"{FOLDER}/../../../escape.log", b"abc")],
            {},
        ),
        ("another task's record", "another task's", members(other), {}),
        ("unfinished", "not finished", members(running), {}),
        ("live snapshot", "a live snapshot", members(live), {}),
        ("size differs", "the manifest says 999", members(sized), {}),
        (
            "extra file",
            "extra ['unlisted.bin']",
            [*members(), (f"{FOLDER}/unlisted.bin", b"x")],
            {},
        ),
        (
            "missing file",
            "missing ['events.jsonl']",
            [m for m in members() if not m[0].endswith("events.jsonl")],
            {},
        ),
        (
            "runyard's status",
            "runyard's own record",
            [*members(with_status), (f"{FOLDER}/status.json", b"{}")],
            {},
        ),
        ("bad run id", "its run_id is not one", members(bad_run), {}),
        ("log range", "log range differs", members(log_range), {}),
        ("hidden file", "hidden files", [*members(), (f"{FOLDER}/.runyard-state", b"x")], {}),
    ]


@pytest.mark.parametrize(
    ("case", "reason", "entries", "links"), forged_cases(), ids=[c[0] for c in forged_cases()]
)
def test_a_forged_replica_is_refused_and_nothing_is_applied(
    workspace: Workspace,
    tmp_path: Path,
    case: str,
    reason: str,
    entries: list[tuple[str, bytes]],
    links: dict[str, str],
) -> None:
    with pytest.raises((SyncRefused, InvalidInput), match=re.escape(reason)):
        apply(workspace, archive(tmp_path / "forged.tar.gz", entries, links))
    assert not workspace.task_dir(TASK).exists(), case
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "escape.log").exists()
    assert not workspace.run_log_path(TASK, RUN).exists()
    assert [p.name for p in workspace.root.glob(".sync-*")] == []


def test_a_gzip_bomb_in_a_file_or_the_metadata_is_refused(
    workspace: Workspace, tmp_path: Path
) -> None:
    bomb = record()
    bomb["replica"]["files"]["zeros.bin"] = {"size": 8 << 20, "revision": "r"}
    path = archive(
        tmp_path / "bomb.tar.gz", [*members(bomb), (f"{FOLDER}/zeros.bin", bytes(8 << 20))]
    )
    assert path.stat().st_size < 64 << 10
    with pytest.raises(InvalidInput, match="larger than sync.max_task_mb"):
        apply(workspace, path, max_bytes=1 << 20)
    assert not workspace.task_dir(TASK).exists()

    padded = json.dumps(record()).encode() + b" " * (33 << 20)  # JSON, past 32 MiB
    entries = [(n, padded if n.endswith("metadata.json") else b) for n, b in members()]
    with pytest.raises(SyncRefused, match="metadata.json is not a file of at most"):
        apply(workspace, archive(tmp_path / "meta-bomb.tar.gz", entries))
    assert not workspace.task_dir(TASK).exists()
