"""Request and response models of the job API (they are its OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from synattn_jobs.specs import ExperimentSpec, ParseJobSpec, PathText, Slug, TrainJobSpec

__all__ = ["ExperimentSpec", "ParseJobSpec", "TrainJobSpec"]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TrainRequest(Request):
    """One training job: a config under the data root, overrides, what to evaluate."""

    name: Slug | None = Field(None, description="run name (default: the config's file name)")
    out: PathText | None = Field(None, description="run folder inside the runs folder")
    spec: TrainJobSpec


class ParseRequest(Request):
    """One parse job: a corpus under the data root into a shard folder under it."""

    name: Slug | None = None
    spec: ParseJobSpec


class TokenRequest(Request):
    """A new bearer token (admins only)."""

    name: Slug = Field(description="the user the token acts for (owner of their jobs)")
    admin: bool = False


class JobView(BaseModel):
    """A job: what it runs (``spec``, the resolved configuration included) and what happened."""

    id: str
    kind: str
    name: str
    owner: str | None
    state: str
    experiment_id: str | None
    variant: str | None
    seed: int | None
    params: dict[str, Any]
    spec: dict[str, Any]
    out_dir: str
    progress: dict[str, Any]
    result: dict[str, Any]
    error: str | None
    attempts: int
    worker: str | None
    cancel_requested: bool
    created_at: float
    started_at: float | None
    heartbeat_at: float | None
    finished_at: float | None


class ExperimentSummary(BaseModel):
    id: str
    name: str
    owner: str | None
    baseline: str
    created_at: float


class ExperimentView(ExperimentSummary):
    spec: dict[str, Any]
    jobs: list[JobView]


class ArtifactInfo(BaseModel):
    name: str = Field(description="path inside the job's folder")
    bytes: int


class Identity(BaseModel):
    name: str
    admin: bool


class NewToken(Identity):
    token: str = Field(description="shown once; only its SHA-256 digest is stored")


class Health(BaseModel):
    status: str
