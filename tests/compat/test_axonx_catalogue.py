"""Every job of AxonX 0.2.2's ``config/default.yaml`` is in runyard's catalogue, as the
AxonX client reads it from ``GET /jobs``, with AxonX's parameters: each of its properties,
its required ones and its ``additionalProperties``, but for the differences docs/axonx.md
names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess, start_server

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)

# the documented differences (docs/axonx.md): job -> (what, AxonX's, runyard's)
DIFFERENCES = {
    ("install_plugin", "required"): ({"path", "sha256"}, set()),  # or runyard's requirement
    ("cancel", "required"): (set(), {"task_id"}),  # a run_id alone is refused
    # the seed's contract: unknown arguments are let through
    ("list_installed_task_definitions", "additionalProperties"): (False, True),
}


def axonx_jobs() -> dict[str, Any]:
    default = next(axonx_venv().glob("lib/python3.12/site-packages/axonx/config/default.yaml"))
    jobs: dict[str, Any] = yaml.safe_load(default.read_text(encoding="utf-8"))["jobs"]
    return jobs


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("axonx-catalogue"))
    try:
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


def test_every_axonx_job_is_listed_with_axonx_parameters(axonx: AxonX) -> None:
    theirs = axonx_jobs()
    assert len(theirs) == 43
    ours = {job["name"]: job for job in axonx.client("list_jobs")}
    assert set(theirs) <= set(ours), set(theirs) - set(ours)
    found = {}
    for name, job in theirs.items():
        axonx_schema = job.get("parameters") or {}
        schema = ours[name]["input_schema"]
        missing = set(axonx_schema.get("properties") or {}) - set(schema.get("properties") or {})
        assert not missing, (name, missing)
        for key, theirs_value, ours_value in (
            ("required", set(axonx_schema.get("required") or []), set(schema.get("required") or [])),
            ("additionalProperties", axonx_schema.get("additionalProperties", True),
             schema.get("additionalProperties", True)),
        ):  # fmt: skip
            if theirs_value != ours_value:
                found[(name, key)] = (theirs_value, ours_value)
    assert found == DIFFERENCES


def test_docs_table_has_one_row_per_axonx_job() -> None:
    doc = Path(__file__).parents[2] / "docs" / "axonx.md"
    rows = re.findall(r"^\| `([a-z_]+)` \|.*\|.*\|$", doc.read_text(encoding="utf-8"), re.M)
    assert sorted(rows) == sorted(axonx_jobs())
