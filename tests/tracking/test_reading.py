"""A run's metrics.jsonl and params.json are read safely: forged files, links, huge and
garbage lines are skipped, never followed or held whole."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from runyard.tracking.points import Point, point_json
from runyard.tracking.reading import (
    MAX_LINE_BYTES,
    read_new_points,
    read_params,
    read_points,
    run_params,
    series,
    summarise,
)
from runyard.wire import TaskStatus


def write_points(folder: Path, points: list[Point], extra: bytes = b"") -> None:
    lines = b"".join(json.dumps(point_json(p)).encode() + b"\n" for p in points)
    (folder / "metrics.jsonl").write_bytes(lines + extra)


def test_points_read_back_in_file_order_and_by_name(tmp_path: Path) -> None:
    points = [Point(name, step, step / 10, 1.0 + step) for step in range(50)
              for name in ("loss", "acc", "loss/val")]
    write_points(tmp_path, points)
    assert read_points(tmp_path) == points
    assert read_points(tmp_path, name="loss") == [p for p in points if p.name == "loss"]
    assert read_points(tmp_path, name="nope") == []
    assert read_points(tmp_path / "missing") == []


def test_garbage_huge_and_cut_lines_are_skipped(tmp_path: Path) -> None:
    good = Point("loss", 0, 1.0, 1.0)
    garbage = b"".join([
        b"not json\n", b"[1,2]\n", b'{"name": "loss"}\n', b"\xff\xfe\n",
        b'{"name": "/etc", "step": 1, "value": 1, "time": 1}\n',
        b"[" * 100_000 + b"\n",  # deep nesting
        b'{"name": "big", "step": 1, "value": 1, "time": 1, "pad": "' + b"x" * (5 << 20)
        + b'"}\n',
    ])
    tail = json.dumps(point_json(Point("loss", 1, 2.0, 2.0))).encode()  # no newline: unfinished
    write_points(tmp_path, [good], garbage + json.dumps(point_json(good)).encode() + b"\n" + tail)
    assert read_points(tmp_path) == [good, good]


def test_a_line_over_the_cap_is_skipped_without_the_next(tmp_path: Path) -> None:
    def padded(step: int, size: int) -> bytes:
        """A valid point made ``size`` bytes long with blanks (JSON allows them)."""
        line = json.dumps(point_json(Point("m", step, 1.0, 1.0)))
        return (line[:-1] + " " * (size - len(line)) + "}").encode()

    data = b"".join(padded(step, size) + b"\n" for step, size in
                    ((0, MAX_LINE_BYTES), (1, MAX_LINE_BYTES + 1), (2, 3 * MAX_LINE_BYTES),
                     (3, 100)))
    (tmp_path / "metrics.jsonl").write_bytes(data)
    assert [p.step for p in read_points(tmp_path)] == [0, 3]


def test_max_bytes_caps_the_read(tmp_path: Path) -> None:
    points = [Point("m", step, 0.0, 0.0) for step in range(1000)]
    write_points(tmp_path, points)
    first_line = len(json.dumps(point_json(points[0]))) + 1
    assert len(read_points(tmp_path, max_bytes=first_line * 10 + 5)) == 10


def test_a_symlinked_or_hard_linked_metrics_file_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.jsonl"
    write_points(tmp_path, [Point("leak", 0, 1.0, 1.0)])
    os.replace(tmp_path / "metrics.jsonl", secret)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").symlink_to(secret)
    assert read_points(run_dir) == []
    (run_dir / "metrics.jsonl").unlink()
    os.link(secret, run_dir / "metrics.jsonl")
    assert read_points(run_dir) == []
    (run_dir / "params.json").symlink_to("/etc/passwd")
    assert read_params(run_dir) == {}


def test_a_fifo_metrics_file_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "metrics.jsonl")
    assert read_points(tmp_path) == []


def test_summary_last_min_max_ignore_nan() -> None:
    points = [Point("a", 0, 3.0, 0), Point("a", 1, math.nan, 0), Point("a", 2, -math.inf, 0),
              Point("a", 5, 2.0, 0), Point("n", 0, math.nan, 0), Point("n", 1, math.nan, 0)]
    assert summarise(points) == {
        "a": {"last": 2.0, "min": "-Infinity", "max": 3.0, "step": 5, "count": 4},
        "n": {"last": "NaN", "min": None, "max": None, "step": 1, "count": 2},
    }


def test_series_in_wire_form() -> None:
    points = [Point("a", 0, 1.0, 10.0), Point("b", 0, math.inf, 11.0), Point("a", 1, 2.0, 12.0)]
    assert series(points) == {
        "a": {"steps": [0, 1], "values": [1.0, 2.0], "times": [10.0, 12.0]},
        "b": {"steps": [0], "values": ["Infinity"], "times": [11.0]},
    }


def test_downsampling_keeps_ends_and_spikes() -> None:
    values = [math.sin(step / 50) for step in range(10_000)]
    values[4321], values[7777] = 1000.0, -1000.0
    points = [Point("m", step, value, float(step)) for step, value in enumerate(values)]
    for max_points in (2, 3, 10, 101, 500):
        got = series(points, max_points)["m"]
        assert len(got["steps"]) <= max_points
        assert got["steps"][0] == 0 and got["steps"][-1] == 9999
        assert got["steps"] == sorted(got["steps"])
        if max_points >= 4:
            assert 4321 in got["steps"] and 7777 in got["steps"]
    assert len(series(points[:7], 10)["m"]["steps"]) == 7


def test_params_are_inputs_updated_with_logged(tmp_path: Path) -> None:
    (tmp_path / "params.json").write_text(json.dumps(
        {"lr": 0.1, "model": "ridge", "/bad": 1, "nested": {"x": 1}}))
    logged = read_params(tmp_path)
    assert logged == {"lr": 0.1, "model": "ridge"}
    status = TaskStatus(task_id="base#t#x", run_id="r1", task_type="base", task_name="x",
                        state="queued", created_at="2026-01-01T00:00:00Z",
                        config={"task_name": "x", "source_tasks": "", "lr": 1.0, "C": 5})
    assert run_params(status, logged) == {"lr": 0.1, "C": 5, "model": "ridge"}
    (tmp_path / "params.json").write_text("[1, 2]")
    assert read_params(tmp_path) == {}
    assert read_params(tmp_path / "missing") == {}


def test_new_points_are_read_from_an_offset_whole_lines_only(tmp_path: Path) -> None:
    write_points(tmp_path, [Point("m", 0, 1.0, 1.0)], b'{"name": "m", "st')
    points, offset = read_new_points(tmp_path, 0)
    assert [p.step for p in points] == [0]
    assert read_new_points(tmp_path, offset) == ([], offset)  # the cut line waits
    with (tmp_path / "metrics.jsonl").open("ab") as handle:
        handle.write(b'ep": 1, "value": 2, "time": 1}\ngarbage\n')
    points, after = read_new_points(tmp_path, offset)
    assert [p.step for p in points] == [1] and after == (tmp_path / "metrics.jsonl").stat().st_size
    with (tmp_path / "metrics.jsonl").open("ab") as handle:
        handle.write(b"x" * 5000)
    assert read_new_points(tmp_path, after, max_bytes=1000) == ([], after + 1000)
    assert read_new_points(tmp_path, 10**9) == ([], 10**9)
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "metrics.jsonl").symlink_to(tmp_path / "elsewhere")
    assert read_new_points(tmp_path, 0) == ([], 0)


def test_the_fast_path_refuses_what_the_full_check_refuses(tmp_path: Path) -> None:
    good = {"name": "m", "step": 0, "value": 1.5, "time": 1.0}
    bad = [
        {**good, "step": 2**64}, {**good, "step": True}, {**good, "value": True},
        {**good, "value": "1.5"}, {**good, "name": "/m"}, {**good, "name": ["m"]},
        {"name": "m", "step": 1, "value": 1.5, "extra": 1.0},
    ]
    lines = [json.dumps(good)] + [json.dumps(obj) for obj in bad] + [
        '{"name": "m", "step": 1, "value": 1.5, "time": NaN}',
        '{"name": "m", "step": 1, "value": 1.5, "time": Infinity}',
        json.dumps(good) + " " + json.dumps(good),  # two values on one line
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert read_points(tmp_path) == [Point("m", 0, 1.5, 1.0)]
    assert read_new_points(tmp_path, 0)[0] == [Point("m", 0, 1.5, 1.0)]
