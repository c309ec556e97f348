"""Server-sent progress events of one job (the database is read off the event loop)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from synattn_jobs.deps import OwnedJob, Settings, Store
from synattn_jobs.store import TERMINAL
from synattn_shared.webapi import StrictJSONRoute, finite_json, problems

router = APIRouter(prefix="/v1/jobs", route_class=StrictJSONRoute, tags=["events"])


@router.get(
    "/{job_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "progress events"},
        **problems(401, 403, 404, 408, 422),
    },
)
async def events(
    job: OwnedJob,
    store: Store,
    settings: Settings,
    interval: Annotated[float, Query(ge=0.1, le=60, allow_inf_nan=False)] = 1.0,
) -> StreamingResponse:
    """``progress`` events while the job changes, then ``end`` (or ``timeout`` after
    ``SYNATTN_EVENTS_MAX_S``)."""
    job_id = job.id
    deadline = time.monotonic() + settings.events_max_s

    async def stream() -> AsyncIterator[str]:
        last = None
        while True:
            current = await asyncio.to_thread(store.get, job_id)
            if current is None:
                return
            view = finite_json({k: current.as_dict()[k] for k in ("id", "state", "progress",
                                                                  "error")})  # fmt: skip
            if view != last:
                yield f"event: progress\ndata: {json.dumps(view)}\n\n"
                last = view
            if current.state in TERMINAL:
                yield f"event: end\ndata: {json.dumps({'state': current.state})}\n\n"
                return
            if time.monotonic() >= deadline:
                yield f"event: timeout\ndata: {json.dumps({'after_s': settings.events_max_s})}\n\n"
                return
            await asyncio.sleep(interval)

    return StreamingResponse(stream(), media_type="text/event-stream")
