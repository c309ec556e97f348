"""Bearer tokens: who am I; admins create tokens for other users."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from synattn_jobs.deps import Admin, Caller, Store
from synattn_jobs.schemas import Identity, NewToken, TokenRequest
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(prefix="/v1/tokens", route_class=StrictJSONRoute, tags=["tokens"])


@router.get("/self", response_model=Identity, responses=problems(401, 403, 408))
def whoami(who: Caller) -> Any:
    return {"name": who.name, "admin": who.admin}


@router.post(
    "", status_code=201, response_model=NewToken, responses=problems(401, 403, 408, 413, 422)
)
def create_token(req: TokenRequest, _: Admin, store: Store) -> Any:
    """A new token for ``name`` (shown once)."""
    return {"name": req.name, "admin": req.admin, "token": store.create_token(req.name, req.admin)}
