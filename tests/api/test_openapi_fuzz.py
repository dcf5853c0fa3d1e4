"""Schemathesis against the server's own OpenAPI: no input may cause a server error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("fuzz"), token="fuzz-token")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def api_schema(fuzz_server: ServerProcess) -> Any:
    return schemathesis.openapi.from_url(
        fuzz_server.url + "/openapi.json", headers=fuzz_server.headers
    )


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: Any, fuzz_server: ServerProcess) -> None:
    response = case.call(base_url=fuzz_server.url, headers=fuzz_server.headers, timeout=20)
    assert response.status_code < 500, response.text
    if response.status_code == 422:
        assert "detail" in response.json()
    if response.status_code == 200 and "json" in response.headers.get("content-type", ""):
        body = response.json()
        assert {"answer", "success", "metadata"} <= set(body)
