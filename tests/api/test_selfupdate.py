"""The update records and pip runs behind the update jobs (api/selfupdate.py), with the
real pip of this interpreter given requirements that install nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runyard.api.selfupdate import Updates, _source, pip_argv
from runyard.errors import NoSuchFile


def test_a_pip_that_fails_settles_its_record_failed_with_its_output(tmp_path: Path) -> None:
    updates = Updates(tmp_path)
    record = updates.install("pip", str(tmp_path / "none-1.0-py3-none-any.whl"), 120)
    assert record["phase"] == "failed" and "pip exited with code" in record["error"]
    assert record["restart_required"] is False and record["after"] == record["before"]
    status = updates.status(record["update_id"])
    assert status["record"] == record
    assert status["log"].startswith("$ ") and "none-1.0-py3-none-any.whl" in status["log"]
    assert updates.status(None)["record"]["update_id"] == record["update_id"]
    assert not updates.busy


def test_a_pip_past_its_timeout_is_killed_and_the_record_says_so(tmp_path: Path) -> None:
    updates = Updates(tmp_path)
    record = updates.install("git", str(tmp_path / "never.whl"), 0.001)
    assert record["phase"] == "failed" and "did not finish in 0.001 s" in record["error"]
    on_disk = json.loads((updates.folder / record["update_id"] / "record.json").read_text())
    assert on_disk["phase"] == "failed"


def test_an_update_id_is_never_a_path(tmp_path: Path) -> None:
    updates = Updates(tmp_path)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "record.json").write_text('{"token": "x"}')
    for bad in ("../../secret", "../secret", "/etc/passwd", "A" * 32, "0" * 31):
        with pytest.raises(ValueError, match="32 lowercase hex digits"):
            updates.status(bad)
    with pytest.raises(NoSuchFile):
        updates.status("0" * 32)
    assert updates.status(None) == {"record": None, "log": ""}


def test_pip_is_this_interpreters_and_never_prompts() -> None:
    import sys

    assert pip_argv("runyard")[:3] == [sys.executable, "-m", "pip"]
    assert "--no-input" in pip_argv("runyard") and pip_argv("x")[-1] == "x"


@pytest.mark.parametrize(
    ("direct", "source"),
    [
        ({}, "index"),
        ({"url": "file:///src", "dir_info": {"editable": True}}, "editable"),
        ({"url": "file:///src", "dir_info": {}}, "directory"),
        ({"url": "https://h/r.git", "vcs_info": {"vcs": "git", "commit_id": "ab"}}, "vcs"),
        ({"url": "file:///r-1.whl", "archive_info": {}}, "archive"),
    ],
)
def test_the_source_follows_pep_610(direct: dict, source: str) -> None:
    assert _source(direct) == source
