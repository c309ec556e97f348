"""The job store's Slurm columns and the state changes only the Slurm executor makes.

Every change is one conditional UPDATE on the state the reconciler saw, so a job's process
recording its own outcome meanwhile always wins.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import or_, select, update

from synattn_jobs.slurm.states import ACTIVE
from synattn_jobs.store import Job, JobStore, _rowcount


def watched(store: JobStore) -> Sequence[Job]:
    """Jobs with a Slurm job that may need a look: unfinished ones, and finished ones whose
    Slurm job Slurm last said was still active."""
    with store.session() as s:
        return s.scalars(
            select(Job).where(
                Job.slurm_job.is_not(None),
                or_(Job.state.in_(("queued", "running")), Job.slurm_state.in_(sorted(ACTIVE))),
            )
        ).all()


def note(store: JobStore, job_id: str, slurm_job: str, state: str, reason: str = "") -> None:
    """Slurm's last word on the job."""
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.slurm_job == slurm_job)
        .values(slurm_state=state[:32], slurm_reason=(reason or None) and reason[:200])
    )
    with store.session() as s:
        s.execute(stmt)


def submitted(store: JobStore, job_id: str, slurm_job: str, again: str | None = None) -> bool:
    """The job is Slurm job ``slurm_job`` now; ``again``: it was submitted anew, why (the job
    goes back to queued, counted in ``release_count``)."""
    values: dict[str, object] = {"slurm_job": slurm_job, "slurm_state": "PENDING",
                                 "slurm_reason": None}  # fmt: skip
    stmt = update(Job).where(Job.id == job_id)
    if again is not None:
        stmt = stmt.where(Job.state.in_(("queued", "running")))
        values.update(state="queued", worker=None, error=again[:4000],
                      release_count=Job.release_count + 1, released_at=time.time())  # fmt: skip
    with store.session() as s:
        return _rowcount(s.execute(stmt.values(**values))) == 1


def end(store: JobStore, job_id: str, was: str, state: str, error: str) -> bool:
    """Move a job the reconciler saw ``was`` (queued or running) to ``state``."""
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.state == was)
        .values(state=state, error=error[:4000], finished_at=time.time(), worker=None)
    )
    with store.session() as s:
        return _rowcount(s.execute(stmt)) == 1


def back_to_queued(store: JobStore, job_id: str, why: str) -> bool:
    """A running job whose Slurm job Slurm requeued itself waits in the queue again."""
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.state == "running")
        .values(state="queued", worker=None, error=why[:4000], heartbeat_at=time.time())
    )
    with store.session() as s:
        return _rowcount(s.execute(stmt)) == 1
