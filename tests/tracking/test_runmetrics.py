"""The worker's schedule of metric writes: a timer's summary never lands after the run's
final one, and the metrics file is named to the task's processes only while it runs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from runyard.runtime.runmetrics import RunMetrics
from runyard.tracking.points import METRICS_ENV


class NoTimer:
    def __init__(self, delay: float, action: Any) -> None:
        pass

    def cancel(self) -> None:
        pass


def test_a_late_timer_summary_never_lands_over_the_final_one(tmp_path: Path) -> None:
    landed: list[int] = []
    inside, release = threading.Event(), threading.Event()

    def publish(metrics: dict[str, Any], params: dict[str, Any]) -> None:
        if threading.current_thread().name == "timer":
            inside.set()
            release.wait(5)
        landed.append(metrics["m"]["count"])

    metrics = RunMetrics(tmp_path, publish, NoTimer)
    metrics.log("m", 1.0)
    timer = threading.Thread(target=metrics._flush_quietly, name="timer")
    timer.start()
    assert inside.wait(5)  # the timer took its summary (1 point) and is publishing it
    metrics.log("m", 2.0)
    closer = threading.Thread(target=metrics.close)
    closer.start()
    time.sleep(0.3)
    release.set()
    timer.join(5)
    closer.join(5)
    assert landed[-1] == 2


def test_the_metrics_file_is_named_while_the_run_runs(tmp_path: Path) -> None:
    before = os.environ.get(METRICS_ENV)
    metrics = RunMetrics(tmp_path, lambda metrics, params: None, NoTimer)
    metrics.start()
    try:
        assert os.environ[METRICS_ENV] == str(tmp_path / ".metrics-in.jsonl")
    finally:
        metrics.close()
    assert os.environ.get(METRICS_ENV) == before


def test_an_input_file_left_by_an_earlier_run_is_not_read_again(tmp_path: Path) -> None:
    (tmp_path / ".metrics-in.jsonl").write_text('{"name": "old", "value": 1}\n')
    published: list[dict[str, Any]] = []
    metrics = RunMetrics(tmp_path, lambda metrics, params: published.append(metrics), NoTimer)
    metrics.start()
    with open(os.environ[METRICS_ENV], "a") as handle:
        handle.write('{"name": "new", "value": 2}\n')
    metrics.close()
    assert list(published[-1]) == ["new"]
