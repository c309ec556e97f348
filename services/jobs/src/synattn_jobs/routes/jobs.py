"""Jobs: submit a training or parse job; list, read and cancel your own; their metrics."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from synattn_jobs.deps import EXPERIMENT_REF, Caller, JobFolder, OwnedJob, Settings, Store
from synattn_jobs.schemas import JobView, ParseRequest, TrainRequest
from synattn_jobs.store import JobState
from synattn_jobs.submit import cancel_job, job_view, submit_parse, submit_train
from synattn_shared.webapi import StrictJSONRoute, finite_json, problems

router = APIRouter(prefix="/v1/jobs", route_class=StrictJSONRoute, tags=["jobs"])
AUTH = (401, 403, 408, 413, 422)


@router.post("/train", status_code=201, response_model=JobView, responses=problems(*AUTH, 429))
def post_train(req: TrainRequest, who: Caller, store: Store, settings: Settings) -> Any:
    """Queue a training job; its whole configuration is checked and stored now (a ``preset``
    expanded into it). A 429 (with Retry-After) when your queued jobs are at your quota."""
    spec = req.train_spec()
    job = submit_train(store, settings, spec, req.name, req.out, who.name, req.priority)
    return job_view(job)


@router.post("/parse", status_code=201, response_model=JobView, responses=problems(*AUTH, 429))
def post_parse(req: ParseRequest, who: Caller, store: Store, settings: Settings) -> Any:
    """Queue a parse job (a corpus under the data root into shards under it)."""
    return job_view(submit_parse(store, settings, req.spec, req.name, who.name, req.priority))


@router.get("", response_model=list[JobView], responses=problems(*AUTH))
def list_jobs(
    who: Caller,
    store: Store,
    state: JobState | None = None,
    experiment: Annotated[str | None, Query(pattern=f"^{EXPERIMENT_REF.pattern}$")] = None,
    kind: Literal["parse", "train"] | None = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 1000,
) -> Any:
    """Your jobs (an admin: everyone's), oldest first."""
    owner = None if who.admin else who.name
    exp_id = None
    if experiment is not None:
        exp = store.experiment(experiment, owner=owner)
        if exp is None:
            return []
        exp_id = exp.id
    return [job_view(j) for j in store.jobs(state, exp_id, kind, limit, owner=owner)]


@router.get("/{job_id}", response_model=JobView, responses=problems(401, 403, 404, 408))
def show_job(job: OwnedJob) -> Any:
    return job_view(job)


@router.post("/{job_id}/cancel", response_model=JobView, responses=problems(401, 403, 404, 408))
def cancel(job: OwnedJob, store: Store, settings: Settings) -> Any:
    """A queued job is cancelled at once, a running one at its next step."""
    done = cancel_job(store, settings, job.id)
    if done is None:  # deleted meanwhile
        raise HTTPException(404, f"no job {job.id}")
    return job_view(done)


@router.get(
    "/{job_id}/metrics",
    response_model=list[dict[str, Any]],
    responses=problems(401, 403, 404, 408, 422),
)
def metrics(folder: JobFolder, limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000) -> Any:
    """The last ``limit`` records of the run's ``metrics.jsonl`` (non-finite numbers as null)."""
    path = None if folder is None else folder / "metrics.jsonl"
    if path is None or not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-limit:]
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(record, dict):
            out.append(finite_json(record))
    return out
