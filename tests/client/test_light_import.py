"""``import runyard.client`` stays light, and the package ships its type information."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import runyard

HEAVY = ("runyard.api", "runyard.runtime", "runyard.repository", "runyard.config",
         "fastapi", "starlette", "uvicorn")  # fmt: skip

PROBE = f"""
import sys
import runyard.client
from runyard import Client, AsyncClient
assert Client is runyard.client.Client and AsyncClient is runyard.client.AsyncClient
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("runyard", "fastapi",
    "starlette", "uvicorn") and any(m == h or m.startswith(h + ".") for h in {HEAVY!r}))
print(",".join(loaded))
"""


def test_importing_the_client_loads_no_server_part() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def test_the_discovery_module_loads_no_http_client_and_no_models() -> None:
    # the CLI finds its workspace through it on every start: it must cost almost nothing
    probe = """
import sys
import runyard.client.discovery, runyard.cli.locate
heavy = ("httpx", "pydantic", "pydantic_settings", "runyard.client.sync", "runyard.client.aio",
         "runyard.client.agents", "runyard.wire", "runyard.config")
print(",".join(sorted(m for m in sys.modules if m.startswith(heavy))))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


def test_py_typed_is_shipped() -> None:
    package = Path(runyard.__file__).parent
    assert (package / "py.typed").is_file()
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    assert "py.typed" in data["tool"]["setuptools"]["package-data"]["runyard"]


def test_help_documents_every_public_method() -> None:
    from runyard.client import AgentsClient, AsyncAgentsClient, AsyncClient, Client

    for cls in (Client, AsyncClient, AgentsClient, AsyncAgentsClient):
        for name, member in vars(cls).items():
            if not name.startswith("_") and callable(member):
                assert member.__doc__ and member.__doc__.strip(), f"{cls.__name__}.{name}"
