"""Experiments: submit a grid; list, read and compare your own."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from synattn_jobs.deps import Caller, OwnedExperiment, Settings, Store
from synattn_jobs.schemas import ExperimentSpec, ExperimentSummary, ExperimentView
from synattn_jobs.store import Experiment
from synattn_jobs.submit import job_view, submit_experiment
from synattn_shared.webapi import StrictJSONRoute, finite_json, problems

router = APIRouter(prefix="/v1/experiments", route_class=StrictJSONRoute, tags=["experiments"])


def _summary(e: Experiment) -> dict[str, Any]:
    return {"id": e.id, "name": e.name, "owner": e.owner, "baseline": e.baseline,
            "created_at": e.created_at}  # fmt: skip


@router.post(
    "",
    status_code=201,
    response_model=ExperimentView,
    responses=problems(401, 403, 408, 413, 422, 429),
)
def post_experiment(spec: ExperimentSpec, who: Caller, store: Store, settings: Settings) -> Any:
    """Queue a grid: every job is validated before the first one is queued, and a grid that
    would put you over your queued-job quota is refused whole (429)."""
    exp, jobs = submit_experiment(store, settings, spec, owner=who.name)
    return {**_summary(exp), "spec": exp.spec, "jobs": [job_view(j) for j in jobs]}


@router.get("", response_model=list[ExperimentSummary], responses=problems(401, 403, 408))
def list_experiments(who: Caller, store: Store) -> Any:
    return [_summary(e) for e in store.experiments(owner=None if who.admin else who.name)]


@router.get("/{ref}", response_model=ExperimentView, responses=problems(401, 403, 404, 408))
def show_experiment(exp: OwnedExperiment, store: Store) -> Any:
    jobs = store.jobs(experiment_id=exp.id)
    return {**_summary(exp), "spec": exp.spec, "jobs": [job_view(j) for j in jobs]}


@router.get("/{ref}/report", response_model=dict[str, Any], responses=problems(401, 403, 404, 408))
def experiment_report(exp: OwnedExperiment, store: Store) -> Any:
    """The comparison table (BLEU mean and spread over seeds, bootstrap p against the
    baseline) as JSON."""
    from synattn_jobs.report import comparison

    return finite_json(comparison(exp, list(store.jobs(experiment_id=exp.id))))
