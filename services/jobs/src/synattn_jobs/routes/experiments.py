"""Experiments: submit a grid; list, read and compare your own (the comparison as JSON, or
the full HTML report with its figures embedded)."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse

from synattn_jobs.deps import Caller, OwnedExperiment, Settings, Store
from synattn_jobs.schemas import ExperimentSpec, ExperimentSummary, ExperimentView
from synattn_jobs.settings import JobSettings
from synattn_jobs.store import Experiment, Job
from synattn_jobs.submit import job_view, submit_experiment
from synattn_shared.paths import UnsafePath, confine
from synattn_shared.webapi import StrictJSONRoute, finite_json, problems

router = APIRouter(prefix="/v1/experiments", route_class=StrictJSONRoute, tags=["experiments"])
MAX_REPORT_BYTES = 32 * 2**20  # the HTML report, its PNG figures inlined as base64
_RENDER = threading.Lock()  # pyplot is not thread-safe; one report is drawn at a time


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


def wants_html(request: Request, fmt: str | None) -> bool:
    """The HTML report when ``?format=html`` asks for it, or (no ``format``) when the Accept
    header ranks ``text/html`` above ``application/json`` (each ranked by its most specific
    media range, RFC 9110 §12.5.1); JSON otherwise, ties included."""
    if fmt is not None:
        return fmt == "html"
    ranked = {"text/html": (-1, 0.0), "application/json": (-1, 0.0)}  # (specificity, q)
    for item in request.headers.get("accept", "").split(",")[:50]:
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = max(0.0, min(1.0, float(value)))
                except ValueError:
                    q = 0.0
        for kind in ranked:
            ranges = ("*/*", kind.split("/")[0] + "/*", kind)  # by specificity
            if media.lower() in ranges:
                rank = (ranges.index(media.lower()), q)
                ranked[kind] = max(ranked[kind], rank)
    return ranked["text/html"][1] > ranked["application/json"][1]


def html_report(exp: Experiment, jobs: list[Job], settings: JobSettings) -> bytes:
    """``report.html`` rendered now (``synattn_jobs.report.write_html``) into the experiment's
    report folder beside its runs, where ``synattn report`` writes it (a temporary folder when
    that lies outside the data root); 409 before any run succeeded, 413 over the size cap."""
    from synattn_jobs.report import comparison, write_html

    done = [j for j in jobs if j.state == "succeeded"]
    if not done:
        states = ", ".join(f"{sum(j.state == s for j in jobs)} {s}"
                           for s in sorted({j.state for j in jobs})) or "no runs"  # fmt: skip
        raise HTTPException(
            409, f"experiment {exp.name!a} has no finished runs yet ({states}): its report "
            "is rendered once a run has succeeded",
        )  # fmt: skip
    assert settings.runs_dir is not None
    try:
        folder: Path | None = confine(
            settings.runs_dir / f"{exp.name}-{exp.id[:6]}" / "report", settings.data_root,
            "report folder", exclude=(settings.home,),
        )  # fmt: skip
    except UnsafePath:
        folder = None  # runs kept outside the data root: render the page and keep nothing
    with _RENDER, tempfile.TemporaryDirectory(prefix="synattn-report-") as scratch:
        report = comparison(exp, jobs)
        page = write_html(report, jobs, folder or Path(scratch))
        size = page.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise HTTPException(
                413, f"the HTML report of {exp.name!a} is {size:,} bytes, over the "
                f"{MAX_REPORT_BYTES:,} this API serves: `synattn report {exp.name}` writes "
                "it on the server",
            )  # fmt: skip
        return page.read_bytes()


@router.get(
    "/{ref}/report",
    response_model=dict[str, Any],
    responses={
        200: {
            "content": {"text/html": {"schema": {"type": "string"}}},
            "description": "The comparison as JSON (the default), or with ?format=html or "
            "Accept: text/html the full report: table, loss curves, gate and head-label "
            "heatmaps, figures embedded",
        },
        **problems(401, 403, 404, 408, 409, 413, 422),
    },
)
def experiment_report(
    exp: OwnedExperiment,
    store: Store,
    settings: Settings,
    request: Request,
    response: Response,
    fmt: Annotated[
        Literal["json", "html"] | None,
        Query(alias="format", description="html: the full report page; default: by Accept"),
    ] = None,
) -> Any:
    """The comparison table (BLEU mean and spread over seeds, bootstrap p against the
    baseline) as JSON; or the HTML report ``synattn report`` writes, rendered now, once a run
    has succeeded (409 before)."""
    from synattn_jobs.report import comparison

    jobs = list(store.jobs(experiment_id=exp.id))
    if wants_html(request, fmt):
        page = html_report(exp, jobs, settings)
        return HTMLResponse(page, headers={"Vary": "Accept", "Cache-Control": "no-store"})
    response.headers["Vary"] = "Accept"
    return finite_json(comparison(exp, jobs))
