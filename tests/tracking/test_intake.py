"""$RUNYARD_METRICS_FILE lines: read incrementally, bad ones refused with a log line,
bounded whatever the file holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

from runyard.tracking.intake import MAX_LINE_BYTES, MAX_REFUSALS, MetricsIntake
from runyard.tracking.points import LoggedLine


def intake_for(path: Path) -> tuple[MetricsIntake, list[LoggedLine], list[str]]:
    taken: list[LoggedLine] = []
    said: list[str] = []
    return MetricsIntake(path, taken.append, said.append), taken, said


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_lines_are_read_by_offset_and_a_partial_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    intake, taken, said = intake_for(path)
    assert intake.poll() == 0  # no file yet
    append(path, b'{"name": "a", "value": 1}\n{"name": "a", "val')
    assert intake.poll() == 1 and taken[0].name == "a" and taken[0].step is None
    append(path, b'ue": 2, "step": 7}\n')
    assert intake.poll() == 1 and taken[1].value == 2.0 and taken[1].step == 7
    assert intake.poll() == 0 and said == []
    append(path, b'{"name": "b", "value": "NaN"}')  # no newline: only the end takes it
    assert intake.poll() == 0
    assert intake.poll(final=True) == 1 and taken[2].name == "b"


def test_bad_lines_are_refused_with_their_number(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join([
        b'{"name": "ok", "value": 1}\n',
        b"garbage\n",
        b'{"name": "/abs", "value": 1}\n',
        b'{"name": "x", "value": "high"}\n',
        b"\n",
        b'{"name": "x", "value": 1, "stpe": 2}\n',
        b"\xff\xfe\n",
        b"[" * 50_000 + b"\n",
        b'{"name": "ok", "value": 2}\n',
    ]))
    intake, taken, said = intake_for(path)
    assert intake.poll() == 2 and [line.value for line in taken] == [1.0, 2.0]
    assert [line.split(":")[1] for line in said] == [
        " line 2 refused", " line 3 refused", " line 4 refused", " line 6 refused",
        " line 7 refused", " line 8 refused"]
    assert said[0] == "metrics: line 2 refused: not JSON (Expecting value)"
    assert "stpe" in said[3] and said[4].endswith("not UTF-8 text")


def test_a_huge_line_is_refused_without_being_held(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    huge = b'{"name": "big", "value": 1, "pad": "' + b"x" * (3 * MAX_LINE_BYTES)
    append(path, huge)
    intake, taken, said = intake_for(path)
    intake.poll()
    assert said == [f"metrics: line 1 refused: longer than {MAX_LINE_BYTES} bytes"]
    assert len(intake._partial) <= MAX_LINE_BYTES
    append(path, b'x"}\n{"name": "after", "value": 3}\n')
    intake.poll(final=True)
    assert [line.name for line in taken] == ["after"] and len(said) == 1


def test_refusals_are_capped(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"nope\n" * 500 + b'{"name": "ok", "value": 1}\n')
    intake, taken, said = intake_for(path)
    intake.poll(final=True)
    assert len(said) == MAX_REFUSALS + 1 and "no more are logged" in said[-1]
    assert len(taken) == 1 and intake.refused == 500


def test_a_symlink_or_fifo_in_its_place_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(json.dumps({"name": "leak", "value": 1}) + "\n")
    path = tmp_path / "in.jsonl"
    path.symlink_to(secret)
    intake, taken, _ = intake_for(path)
    assert intake.poll(final=True) == 0
    path.unlink()
    os.mkfifo(path)
    assert intake.poll(final=True) == 0 and taken == []


def test_a_refusing_record_callback_is_a_refused_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"name": "a", "value": 1}\n')

    def refuse(line: LoggedLine) -> None:
        raise ValueError("a run may log at most 1000 metrics")

    said: list[str] = []
    MetricsIntake(path, refuse, said.append).poll()
    assert said == ["metrics: line 1 refused: a run may log at most 1000 metrics"]
