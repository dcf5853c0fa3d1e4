"""``list_studio_pages`` driven by the real AxonX 0.2.2 CLI: AxonX's own ``studio:`` block
(from its ``config/default.yaml``) in runyard.yaml, answered as AxonX's step answers it and
validated with its ``StudioPage`` model in AxonX's venv."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from axonx_support import VENV, AxonX, axonx_venv  # skips the module without Python 3.12

from serverproc import ServerProcess, start_server

if not (VENV / ".ready").exists():
    pytestmark = pytest.mark.timeout(900)

# AxonX's own answer for a studio block (its ListStudioPagesStep), and its model's check
AXONX_SIDE = """
import json, sys
from pydantic import TypeAdapter
from axonx.config.models import StudioConfig, StudioPage
if sys.argv[1] == "expect":
    config = StudioConfig.model_validate(json.load(sys.stdin))
    print(json.dumps([{"id": n, **p.model_dump(mode="json")} for n, p in config.pages.items()]))
else:
    TypeAdapter(list[StudioPage]).validate_python(json.load(sys.stdin))
"""


def axonx_default_studio() -> dict[str, Any]:
    default = next(axonx_venv().glob("lib/python3.12/site-packages/axonx/config/default.yaml"))
    studio: dict[str, Any] = yaml.safe_load(default.read_text(encoding="utf-8"))["studio"]
    return studio


def in_axonx(mode: str, value: Any) -> str:
    done = subprocess.run(
        [str(axonx_venv() / "bin" / "python"), "-c", AXONX_SIDE, mode],
        input=json.dumps(value), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = {"studio": axonx_default_studio()}
    proc = start_server(tmp_path_factory.mktemp("axonx-studio"), config=config)
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


def test_list_studio_pages_answers_as_axonx_does(srv: ServerProcess, axonx: AxonX) -> None:
    answer = axonx.ok("list_studio_pages")["answer"]
    in_axonx("validate", answer)
    # AxonX's own answer for the studio block the server read, pages in the file's order
    as_written = yaml.safe_load(srv.config_path.read_text(encoding="utf-8"))["studio"]
    assert answer == json.loads(in_axonx("expect", as_written))
    assert {page["id"] for page in answer} == set(axonx_default_studio()["pages"]) == {
        "online", "comparison", "data", "sync",
    }  # fmt: skip
    listed = {job["name"]: job for job in axonx.client("list_jobs")}
    assert listed["list_studio_pages"]["input_schema"]["additionalProperties"] is False


def test_list_studio_pages_takes_no_argument(srv: ServerProcess) -> None:
    with srv.client() as client:
        reply = client.post("/jobs/list_studio_pages", json={"arguments": {"page": "online"}})
    assert reply.status_code == 422 and "page" in reply.text
