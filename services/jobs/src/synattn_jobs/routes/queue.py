"""The queue as fair share sees it: your queued jobs in order, everyone's counts; quotas."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from synattn_jobs.deps import Admin, Caller, Settings, Store
from synattn_jobs.schemas import QueueView, QuotaRequest, QuotaView
from synattn_shared.paths import SLUG_PATTERN
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(prefix="/v1", route_class=StrictJSONRoute, tags=["queue"])
MAX_LISTED = 2000


@router.get("/queue", response_model=QueueView, responses=problems(401, 403, 408))
def queue(who: Caller, store: Store, settings: Settings) -> Any:
    """Your queued jobs with their positions (1 = next to start on its queue), and every
    user's numbers of queued and running jobs (counts only: no other user's job details)."""
    view = store.queue(fifo=settings.dispatch == "fifo")
    positions = view["positions"]
    mine = store.jobs("queued", owner=None if who.admin else who.name, limit=100_000)
    jobs = sorted(
        (
            {"id": j.id, "kind": j.kind, "name": j.name, "priority": j.priority or 0,
             "position": positions.get(j.id, 0), "released": j.released_at is not None}
            for j in mine
            if j.id in positions
        ),
        key=lambda r: (r["kind"], r["position"]),
    )[:MAX_LISTED]  # fmt: skip
    users = [
        {"user": u or "local", "queued": c.get("queued", 0), "running": c.get("running", 0)}
        for u, c in sorted(view["counts"].items())
    ]
    return {"jobs": jobs, "users": users, "dispatch": settings.dispatch}


@router.get("/quotas", response_model=list[QuotaView], responses=problems(401, 403, 408))
def quotas(_: Admin, store: Store, settings: Settings) -> Any:
    """Every user's overrides (admins only); the defaults are the first row, user ``*``."""
    rows = [{"user": "*", "queued": settings.max_queued_per_user,
             "running": settings.max_running_per_user}]  # fmt: skip
    rows += [{"user": q.user, "queued": q.max_queued, "running": q.max_running}
             for q in store.quotas()]  # fmt: skip
    return rows


@router.put(
    "/quotas/{user}", response_model=QuotaView, responses=problems(401, 403, 408, 413, 422)
)
def set_quota(user: str, req: QuotaRequest, _: Admin, store: Store) -> Any:
    """Set one user's limits (admins only); null falls back to the server's default."""
    import re

    if not re.fullmatch(SLUG_PATTERN, user):
        raise HTTPException(422, f"user {user[:40]!a} is not a name")
    row = store.set_quota(user, req.queued, req.running)
    return {"user": row.user, "queued": row.max_queued, "running": row.max_running}
