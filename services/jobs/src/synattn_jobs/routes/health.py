"""Liveness (no token needed)."""

from __future__ import annotations

from fastapi import APIRouter

from synattn_jobs.schemas import Health
from synattn_shared.webapi import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute, tags=["service"])


@router.get("/v1/health", summary="Liveness")
async def health() -> Health:
    return Health(status="ok")
