"""Dependencies of the job API routes: who calls, what they may touch, and where files lie.

Each route names these in its signature, so one line says who may call it and what it reads:
``Caller`` (a valid token, else 401/403), ``OwnedJob`` / ``OwnedExperiment`` (404 unless the
caller owns it or is an admin), ``ArtifactPath`` (a file inside the job's own folder, which
itself lies inside the runs folder, symlinks followed; else 404).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from synattn_jobs.settings import JobSettings
from synattn_jobs.store import Experiment, Job, JobStore, Principal
from synattn_shared.paths import SLUG_PATTERN, UnsafePath, confine
from synattn_shared.webapi import app_state

JOB_ID = re.compile(r"[0-9a-f]{12}")
EXPERIMENT_REF = re.compile(SLUG_PATTERN)
_bearer = HTTPBearer(auto_error=False)


Store = Annotated[JobStore, Depends(app_state("store", JobStore))]
Settings = Annotated[JobSettings, Depends(app_state("settings", JobSettings))]


def caller(
    cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)], store: Store
) -> Principal:
    """The token's holder (401 without a bearer token, 403 for an invalid or revoked one)."""
    if cred is None or cred.scheme.lower() != "bearer":
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
    who = store.check_token(cred.credentials)
    if who is None:
        raise HTTPException(403, "invalid or revoked token")
    return who


Caller = Annotated[Principal, Depends(caller)]


def admin(who: Caller) -> Principal:
    """Only an admin token (``synattn token create NAME --admin``)."""
    if not who.admin:
        raise HTTPException(403, "this needs an admin token")
    return who


Admin = Annotated[Principal, Depends(admin)]


def owned_job(job_id: str, who: Caller, store: Store) -> Job:
    """The job, when it exists and the caller may see it; otherwise 404 (others' jobs are not
    told apart from missing ones)."""
    job = store.get(job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None or not who.may_see(job.owner):
        raise HTTPException(404, f"no job {job_id[:40]!a}")
    return job


OwnedJob = Annotated[Job, Depends(owned_job)]


def owned_experiment(ref: str, who: Caller, store: Store) -> Experiment:
    """An experiment by id or name, among those the caller may see; otherwise 404."""
    exp = None
    if EXPERIMENT_REF.fullmatch(ref):
        exp = store.experiment(ref, owner=None if who.admin else who.name)
    if exp is None:
        raise HTTPException(404, f"no experiment {ref[:40]!a}")
    return exp


OwnedExperiment = Annotated[Experiment, Depends(owned_experiment)]


def job_folder(job: OwnedJob, settings: Settings) -> Path | None:
    """The job's own folder, confined to the data root (None while it does not exist)."""
    try:
        folder = confine(job.out_dir, settings.data_root, "run folder", exclude=(settings.home,))
    except UnsafePath:
        return None  # a job recorded before paths were confined: serve nothing from it
    return folder if folder.is_dir() else None


JobFolder = Annotated[Path | None, Depends(job_folder)]


def artifact_path(name: str, folder: JobFolder) -> Path:
    """A file inside the job's folder (resolved, symlinks followed); otherwise 404."""
    if folder is None:
        raise HTTPException(404, f"no artifact {name[:80]!a}")
    try:
        path = confine(name, folder, "artifact")
    except UnsafePath:
        raise HTTPException(404, f"no artifact {name[:80]!a}") from None
    if not path.is_file():
        raise HTTPException(404, f"no artifact {name[:80]!a}")
    return path


ArtifactPath = Annotated[Path, Depends(artifact_path)]
