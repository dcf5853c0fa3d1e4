"""Background work that lives as long as the server: started after the app's own start-up,
stopped (in a worker thread, it may block) before the app's own shutdown.

>>> run_beside(app, outbox.start, outbox.stop)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool


def run_beside(app: FastAPI, start: Callable[[], Any], stop: Callable[[], Any]) -> None:
    """Wrap the app's lifespan so ``start()`` runs once it is up and ``stop()`` before it ends."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(asgi_app: Any) -> AsyncIterator[Any]:
        async with inner(asgi_app) as state:
            start()
            try:
                yield state
            finally:
                await run_in_threadpool(stop)

    app.router.lifespan_context = lifespan
