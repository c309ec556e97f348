"""The job API: submit parse jobs, training jobs and experiments; list, get, cancel; metrics,
artifacts and progress (server-sent events). Every route but ``/v1/health`` needs a bearer token
(``synattn token create NAME``); tokens are stored hashed. Run: ``synattn serve-jobs``.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings, get_settings
from synattn_jobs.specs import ExperimentSpec, ParseJobSpec, TrainJobSpec
from synattn_jobs.store import TERMINAL, Job, JobStore
from synattn_jobs.submit import job_view, submit_experiment, submit_parse, submit_train
from synattn_shared.asgi import BodyLimit


class TrainRequest(BaseModel):
    name: str | None = Field(None, max_length=200)
    out: str | None = None
    spec: TrainJobSpec


class ParseRequest(BaseModel):
    name: str | None = Field(None, max_length=200)
    spec: ParseJobSpec


def create_app(settings: JobSettings | None = None) -> FastAPI:
    settings = settings or get_settings()
    store = JobStore(settings.database_url)
    app = FastAPI(
        title="synattn job API",
        version="1",
        description="Queue parse and training jobs and experiments; follow and compare them.",
    )
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)  # type: ignore[arg-type]
    bearer = HTTPBearer(auto_error=False)

    def auth(
        cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> str:
        if cred is None or cred.scheme.lower() != "bearer":
            raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        name = store.check_token(cred.credentials)
        if name is None:
            raise HTTPException(403, "invalid or revoked token")
        return name

    User = Annotated[str, Depends(auth)]

    @app.exception_handler(BadJobSpec)
    async def _bad_spec(_: Request, exc: BadJobSpec) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    def get_job(job_id: str) -> Job:
        job = store.get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return job

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/jobs/train", status_code=201)
    def post_train(req: TrainRequest, _: User) -> dict[str, Any]:
        return job_view(submit_train(store, settings, req.spec, req.name, req.out))

    @app.post("/v1/jobs/parse", status_code=201)
    def post_parse(req: ParseRequest, _: User) -> dict[str, Any]:
        return job_view(submit_parse(store, settings, req.spec, req.name))

    @app.post("/v1/experiments", status_code=201)
    def post_experiment(spec: ExperimentSpec, _: User) -> dict[str, Any]:
        exp, jobs = submit_experiment(store, settings, spec)
        return {"id": exp.id, "name": exp.name, "jobs": [job_view(j) for j in jobs]}

    @app.get("/v1/jobs")
    def list_jobs(
        _: User,
        state: str | None = None,
        experiment: str | None = None,
        kind: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[dict[str, Any]]:
        return [job_view(j) for j in store.jobs(state, experiment, kind, limit)]

    @app.get("/v1/jobs/{job_id}")
    def show_job(job_id: str, _: User) -> dict[str, Any]:
        return job_view(get_job(job_id))

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(job_id: str, _: User) -> dict[str, Any]:
        job = store.request_cancel(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return job_view(job)

    @app.get("/v1/jobs/{job_id}/metrics")
    def metrics(job_id: str, _: User) -> list[dict[str, Any]]:
        path = Path(get_job(job_id).out_dir) / "metrics.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    @app.get("/v1/jobs/{job_id}/artifacts")
    def artifacts(job_id: str, _: User) -> list[dict[str, Any]]:
        root = Path(get_job(job_id).out_dir)
        if not root.is_dir():
            return []
        return [
            {"name": str(p.relative_to(root)), "bytes": p.stat().st_size}
            for p in sorted(root.rglob("*"))
            if p.is_file() and "tb" not in p.relative_to(root).parts[:1]
        ]

    @app.get("/v1/jobs/{job_id}/artifacts/{name:path}")
    def artifact(job_id: str, name: str, _: User) -> FileResponse:
        root = Path(get_job(job_id).out_dir).resolve()
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise HTTPException(404, f"no artifact {name!r}")
        return FileResponse(path)

    @app.get("/v1/jobs/{job_id}/events")
    async def events(job_id: str, _: User, interval: float = 1.0) -> StreamingResponse:
        get_job(job_id)
        interval = min(max(interval, 0.1), 30.0)

        async def stream() -> AsyncIterator[str]:
            last = None
            while True:
                job = await asyncio.to_thread(store.get, job_id)
                if job is None:
                    return
                view = {k: job.as_dict()[k] for k in ("id", "state", "progress", "error")}
                if view != last:
                    yield f"event: progress\ndata: {json.dumps(view)}\n\n"
                    last = view
                if job.state in TERMINAL:
                    yield f"event: end\ndata: {json.dumps({'state': job.state})}\n\n"
                    return
                await asyncio.sleep(interval)

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.get("/v1/experiments")
    def list_experiments(_: User) -> list[dict[str, Any]]:
        return [
            {"id": e.id, "name": e.name, "baseline": e.baseline, "created_at": e.created_at}
            for e in store.experiments()
        ]

    @app.get("/v1/experiments/{ref}")
    def show_experiment(ref: str, _: User) -> dict[str, Any]:
        exp = store.experiment(ref)
        if exp is None:
            raise HTTPException(404, f"no experiment {ref}")
        jobs = store.jobs(experiment_id=exp.id)
        return {"id": exp.id, "name": exp.name, "baseline": exp.baseline, "spec": exp.spec,
                "jobs": [job_view(j) for j in jobs]}  # fmt: skip

    @app.get("/v1/experiments/{ref}/report")
    def experiment_report(ref: str, _: User) -> dict[str, Any]:
        from synattn_jobs.report import comparison

        exp = store.experiment(ref)
        if exp is None:
            raise HTTPException(404, f"no experiment {ref}")
        return comparison(exp, list(store.jobs(experiment_id=exp.id)))

    return app


def app_factory() -> FastAPI:
    """For ``uvicorn --factory synattn_jobs.api:app_factory``."""
    return create_app()
