"""The job API: submit parse jobs, training jobs and experiments; list, get, cancel; metrics,
artifacts and progress (server-sent events); tokens. Every route but ``/v1/health`` needs a
bearer token (``synattn token create NAME``); a user sees only their own jobs, an admin token
sees all. The experiment dashboard at ``/`` is a page over these same routes. ``create_app``
only assembles: the routes live in ``synattn_jobs.routes``, and who may call each one is in its
signature (``synattn_jobs.deps``). Run: ``synattn serve-jobs``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.routes import (
    artifacts,
    attention,
    events,
    experiments,
    health,
    jobs,
    queue,
    tokens,
    translate,
)
from synattn_jobs.settings import JobSettings, get_settings
from synattn_jobs.store import JobStore, QuotaExceeded
from synattn_shared.asgi import BodyLimit
from synattn_shared.webapi import install_error_handlers, problems, safe_text
from synattn_shared.webui import install_page

DESCRIPTION = """Queue parse and training jobs and experiments; follow and compare them.

**Paths.** Every path in a request (a training config, a corpus, a shard folder, a grid's
`config`) is relative to the job service's data root, or absolute inside it; `..` is refused.
The data root is the setting `SYNATTN_DATA_ROOT`, by default the working directory the service
was started in. An error about a path names the root it was resolved against. A grid file given
to `synattn experiment run` names its config relative to the file; posted here, the same grid
names it relative to the data root (`configs/tiny.yaml`, not `../configs/tiny.yaml`).

**Bodies.** Every request body below has an example; a body of the wrong shape is answered with
a 422 that shows it."""


async def _bad_spec(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": safe_text(exc, 1000)}, status_code=422)


async def _over_quota(_: Request, exc: Exception) -> JSONResponse:
    retry = getattr(exc, "retry_after_s", 60)
    return JSONResponse(
        {"detail": safe_text(exc, 1000)}, status_code=429, headers={"Retry-After": str(retry)}
    )


@asynccontextmanager
async def _slurm_reconciler(app: FastAPI) -> AsyncIterator[None]:
    """Under the Slurm executor the API keeps the store in line with Slurm while it serves
    (``synattn_jobs.slurm.executor.Reconciler``)."""
    settings: JobSettings = app.state.settings
    if settings.executor != "slurm":
        yield
        return
    from synattn_jobs.slurm.executor import Reconciler

    thread = Reconciler(app.state.store, settings)
    thread.start()
    try:
        yield
    finally:
        thread.stop.set()


def create_app(settings: JobSettings | None = None) -> FastAPI:
    """The job API for ``settings`` (default: from ``SYNATTN_*``)."""
    settings = settings or get_settings()
    app = FastAPI(
        title="synattn job API",
        version="1",
        description=DESCRIPTION,
        responses=problems(413),
        lifespan=_slurm_reconciler,
    )
    app.state.settings = settings
    app.state.store = JobStore(settings.database_url)
    install_error_handlers(app)
    app.add_exception_handler(BadJobSpec, _bad_spec)
    app.add_exception_handler(QuotaExceeded, _over_quota)
    for module in (
        health, jobs, queue, artifacts, attention, translate, events, experiments, tokens,
    ):  # fmt: skip
        app.include_router(module.router)
    install_page(app, Path(__file__).parent / "static", "dashboard.html")  # the dashboard
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app


def app_factory() -> FastAPI:
    """For ``uvicorn --factory synattn_jobs.api:app_factory``; a broken or clashing plugin
    install (``synattn_trainer.plugins``) is refused here, before serving."""
    from synattn_trainer.plugins import load_plugins

    load_plugins()
    return create_app()
