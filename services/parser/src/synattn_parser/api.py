"""The parser REST API: ``/v1/parse``, ``/v1/backends``, ``/v1/health``, ``/v1/ready``, metrics,
and the parse playground at ``/`` (a page that calls ``/v1/parse`` like any client).

``create_app`` only assembles: settings, the model pool, middleware, error handlers and the
routers of ``synattn_parser.routes``. Run it with ``synattn serve-parser`` (header and body
time limits) or ``uvicorn synattn_parser.api:create_app --factory``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from synattn_parser.metrics import Metrics, ParserMetrics
from synattn_parser.pool import ParserPool
from synattn_parser.routes import health, parse
from synattn_parser.settings import ParserSettings
from synattn_shared import __version__
from synattn_shared.asgi import BodyLimit
from synattn_shared.heap import freeze_heap
from synattn_shared.webapi import install_error_handlers, problems
from synattn_shared.webui import install_page


def create_app(settings: ParserSettings | None = None) -> FastAPI:
    """The parser API application (a factory, so tests and workers build their own)."""
    cfg = settings or ParserSettings()
    metrics = ParserMetrics()
    pool = ParserPool(cfg, metrics)
    state: dict[str, Any] = {"loading": None}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        freeze_heap()  # start-up's objects: out of every later full collection
        if cfg.preload:
            state["loading"] = asyncio.create_task(pool._preload_quietly())
        yield
        await pool.close()

    app = FastAPI(
        title="synattn parser",
        version=__version__,
        description="Sentences in, syntax out: dependency and constituency parses and the "
        "features syntax-aware attention variants consume.",
        lifespan=lifespan,
        responses=problems(413),
    )
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(parse.router)
    install_page(app, Path(__file__).parent / "static", "playground.html")  # the playground
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)
    app.add_middleware(Metrics, metrics=metrics)  # outermost: counts 413s
    app.state.pool = pool
    app.state.settings = cfg
    app.state.metrics = metrics
    return app
