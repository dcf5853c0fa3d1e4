"""The worker's recorder: next steps, summaries, batched appends, params, bounds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from runyard.errors import InvalidInput
from runyard.tracking.reading import read_points, summarise
from runyard.tracking.recorder import MAX_METRICS, MetricRecorder


def test_steps_summary_and_one_append_per_flush(tmp_path: Path) -> None:
    recorder = MetricRecorder(tmp_path)
    recorder.log("loss", 3)
    recorder.log("loss", math.nan)
    recorder.log("loss", 1.5, step=10)
    recorder.log("loss", True)
    assert recorder.pending == 4 and not (tmp_path / "metrics.jsonl").exists()
    assert recorder.flush() and recorder.pending == 0
    points = read_points(tmp_path)
    assert [p.step for p in points] == [0, 1, 10, 11]
    assert recorder.summary() == summarise(points) == {
        "loss": {"last": 1.0, "min": 1.0, "max": 3.0, "step": 11, "count": 4}}
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["value"] == "NaN"  # strict JSON: no bare NaN token
    json.loads(lines[1], parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert not recorder.flush()


def test_refused_logs_change_nothing(tmp_path: Path) -> None:
    recorder = MetricRecorder(tmp_path)
    for name, value, step in [("/x", 1, None), ("a", "1", None), ("a", 1, 1.5),
                              ("a", None, None), ("a", 1, 2**63)]:
        with pytest.raises(InvalidInput):
            recorder.log(name, value, step)
    assert recorder.pending == 0 and recorder.summary() == {}
    with pytest.raises(InvalidInput):
        recorder.log_params({"ok": 1, "bad": [1, 2]})
    assert recorder.params() == {}


def test_metric_and_param_counts_are_bounded(tmp_path: Path) -> None:
    recorder = MetricRecorder(tmp_path)
    for index in range(MAX_METRICS):
        recorder.log(f"m{index}", 1.0)
    with pytest.raises(InvalidInput, match="at most"):
        recorder.log("one-more", 1.0)
    recorder.log("m0", 2.0)  # a known one still logs
    with pytest.raises(InvalidInput, match="at most"):
        recorder.log_params({f"p{index}": index for index in range(1001)})


def test_params_written_atomically_when_changed(tmp_path: Path) -> None:
    recorder = MetricRecorder(tmp_path)
    recorder.log_params({"lr": 0.1, "note": "x" * 7000})
    recorder.flush()
    written = json.loads((tmp_path / "params.json").read_text())
    assert written == {"lr": 0.1, "note": "x" * 6000}
    recorder.log_params({"lr": 0.2})
    recorder.flush()
    assert json.loads((tmp_path / "params.json").read_text())["lr"] == 0.2


def test_numpy_scalars_are_numbers(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    recorder = MetricRecorder(tmp_path)
    for value in (np.float32(1.5), np.int64(3), np.float64("nan"), np.bool_(True)):
        recorder.log("a", value)
    recorder.log_params({"n": np.int64(5), "f": np.float32(0.25), "big": np.uint64(2**64 - 1)})
    assert recorder.summary()["a"] == {"last": 1.0, "min": 1.0, "max": 3.0, "step": 3,
                                       "count": 4}
    assert recorder.params() == {"n": 5, "f": 0.25, "big": str(2**64 - 1)}
    recorder.flush()
    assert [p.value for p in read_points(tmp_path)][:2] == [1.5, 3.0]
    with pytest.raises(InvalidInput):
        recorder.log("a", np.array([1.0, 2.0]))


def test_log_many_keeps_all_or_none(tmp_path: Path) -> None:
    recorder = MetricRecorder(tmp_path)
    for bad in ({"ok": 1.0, "/bad": 2.0}, {"ok": 1.0, "v": "x"}, {"ok": 1.0, 3: 1.0}):
        with pytest.raises(InvalidInput):
            recorder.log_many(bad)
    with pytest.raises(InvalidInput):
        recorder.log_many({"ok": 1.0}, step=1.5)  # type: ignore[arg-type]
    assert recorder.pending == 0 and recorder.summary() == {}
    assert recorder.log_many({"a": 1, "b": 2.5}, step=4) == 2
    assert {name: s["step"] for name, s in recorder.summary().items()} == {"a": 4, "b": 4}
