"""/mcp's endpoint is built once the start-up is over, or at the first /mcp request if
that comes first; never while the index is being built."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import httpx
from starlette.applications import Starlette

from runyard.api.mcp_lazy import LazyMcp, mount_lazy_mcp
from runyard.api.services import Services
from runyard.api.startup import Startup

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from runtime_helpers import make_settings  # noqa: E402

INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}},
}  # fmt: skip
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def lazy_app(tmp_path: Path) -> tuple[Services, Startup, Starlette, LazyMcp]:
    services = Services.build(make_settings(tmp_path))
    startup = Startup(services)
    app = Starlette()
    lazy = mount_lazy_mcp(app, services, services.changes, "1")
    startup.when_ready(lazy.start_soon)
    return services, startup, app, lazy


async def built(lazy: LazyMcp) -> bool:
    await asyncio.wait_for(lazy._ready.wait(), 60)
    return lazy._app is not None


def test_built_after_the_start_up_not_during_it(tmp_path: Path) -> None:
    services, startup, _app, lazy = lazy_app(tmp_path)

    async def scenario() -> None:
        async with lazy.run():
            # a build in the background would be over in this time (about 1 s of CPU)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lazy._ready.wait(), 6)
            assert not lazy._ready.is_set() and lazy._app is None
            startup.begin()
            assert await startup.wait(60)
            assert await built(lazy)  # without any /mcp request

    try:
        asyncio.run(scenario())
    finally:
        startup.join()
        services.stop()


def test_a_request_before_the_start_up_builds_it_and_is_answered(tmp_path: Path) -> None:
    services, _startup, app, lazy = lazy_app(tmp_path)  # the start-up never ends here

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with lazy.run(), httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            await asyncio.sleep(0.2)
            assert not lazy._ready.is_set()
            reply = await asyncio.wait_for(c.post("/mcp", json=INITIALIZE, headers=HEADERS), 60)
            assert reply.status_code == 200, reply.text
            assert "runyard" in reply.text  # the server's name in its initialize answer
            assert await built(lazy)

    try:
        asyncio.run(scenario())
    finally:
        services.stop()
