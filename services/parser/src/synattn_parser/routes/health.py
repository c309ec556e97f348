"""Liveness, readiness, the backends this install offers, and Prometheus metrics."""

from __future__ import annotations

from typing import get_args

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from synattn_parser.backends import backend_status
from synattn_parser.deps import Metrics, Pool, Settings
from synattn_parser.schemas import BackendInfo, BackendsResponse, Health, Ready
from synattn_parser.settings import Scheme
from synattn_parser.subwords import vocabularies
from synattn_shared.materialise import ALL_FEATURES
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(route_class=StrictJSONRoute, tags=["service"])


@router.get("/v1/health", summary="Liveness")
async def health() -> Health:
    return Health(status="ok")


@router.get(
    "/v1/ready",
    summary="Readiness: the default backend's models are loaded",
    response_model=Ready,
    responses={503: {"model": Ready, "description": "Still loading, or the model failed"}},
)
async def ready(cfg: Settings, pool: Pool) -> JSONResponse:
    if cfg.backend in pool.infos:
        info = pool.infos[cfg.backend]
        return JSONResponse({"ready": True, "backend": cfg.backend, "model": info.model})
    reason = pool.errors.get(cfg.backend, f"loading backend {cfg.backend}")
    return JSONResponse({"ready": False, "detail": reason}, status_code=503)


@router.get(
    "/v1/backends",
    response_model=BackendsResponse,
    summary="Backends and features",
    responses=problems(),
)
async def backends(cfg: Settings, pool: Pool) -> BackendsResponse:
    statuses = await run_in_threadpool(backend_status, cfg)
    return BackendsResponse(
        backends=[
            BackendInfo(
                name=s.name,
                available=s.available and s.name not in pool.errors,
                loaded=s.name in pool.infos,
                default=s.name == cfg.backend,
                description=s.description,
                reason=pool.errors.get(s.name, s.reason),
            )
            for s in statuses
        ],
        features=list(ALL_FEATURES),
        schemes=list(get_args(Scheme)),
        tokenizers=vocabularies(cfg),
    )


@router.get("/metrics", include_in_schema=False)
async def prometheus(metrics: Metrics) -> PlainTextResponse:
    return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
