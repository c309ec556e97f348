"""The job store: the source of truth for jobs, experiments, progress, results and API tokens.

SQLAlchemy over SQLite (default, WAL so workers and the API share it) or PostgreSQL. Celery only
carries job ids; a task claims its job here with one conditional UPDATE, so a redelivered or
requeued task never runs a job twice in parallel and never reruns a finished one.

Its tables are in ``store_tables``; its fair-share queries (quotas, workers, the next job to
release) in ``fair_share``, a base class of ``JobStore``. Here: the schema, sessions, a job's
life (submit, claim, heartbeat, finish, cancel, requeue) and API tokens.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from synattn_jobs.fair_share import FairShareQueries, fair_order
from synattn_jobs.store_tables import (
    ADDED_COLUMNS,
    DISPATCH_INDEXES,
    LOCAL_ADMIN,
    LOCKS,
    SCHEMA_LOCK_KEY,
    TERMINAL,
    ApiToken,
    Base,
    Experiment,
    Job,
    JobKind,
    JobState,
    Lock,
    Principal,
    QuotaExceeded,
    UserStart,
    _new_job,
    _owned_by,
    _rowcount,
    make_engine,
    new_id,
    token_digest,
)

__all__ = [  # what other modules import from here (the tables live in store_tables)
    "LOCAL_ADMIN",
    "TERMINAL",
    "ApiToken",
    "Experiment",
    "Job",
    "JobKind",
    "JobState",
    "JobStore",
    "Principal",
    "QuotaExceeded",
    "_new_job",
    "_rowcount",
    "fair_order",
    "new_id",
    "token_digest",
]


class JobStore(FairShareQueries):
    """Transactions over the job tables; every method opens and commits its own session."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        with self._schema_lock():
            Base.metadata.create_all(self.engine)
            self._add_missing_columns()
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """One process at a time creates or upgrades the tables. On PostgreSQL, services that
        start together on an empty database (the compose stack's API and workers) would
        otherwise race in CREATE TABLE and lose with a duplicate-type error; an advisory
        lock serialises them. SQLite serialises writers itself."""
        if self.engine.dialect.name != "postgresql":
            yield
            return
        with self.engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
                conn.commit()

    def _add_missing_columns(self) -> None:
        """Bring a store made by an earlier release up to date (new nullable columns only)."""
        have = inspect(self.engine)
        with self.engine.begin() as conn:
            for table, column, sql_type in ADDED_COLUMNS:
                if column not in {c["name"] for c in have.get_columns(table)}:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))
        for index in DISPATCH_INDEXES:
            index.create(self.engine, checkfirst=True)
        with self.engine.begin() as conn:
            present = set(conn.scalars(select(Lock.name)))
            for name in LOCKS:
                if name not in present:
                    try:
                        with conn.begin_nested():
                            conn.execute(insert(Lock).values(name=name, at=0.0))
                    except Exception:  # another process made it first
                        pass

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._session.begin() as s:
            yield s

    # ------------------------------------------------------------ creating
    def create_job(
        self, kind: JobKind, name: str, spec: dict[str, Any], out_dir: str, **fields: Any
    ) -> Job:
        """One queued job outside any quota (``submit`` checks them); ``fields`` are
        ``_new_job``'s keywords (experiment_id, variant, seed, params, owner, priority)."""
        job = _new_job(kind, name, spec, out_dir, **fields)
        with self.session() as s:
            s.add(job)
        return job

    def submit(
        self,
        jobs: list[dict[str, Any]],
        owner: str | None,
        max_queued: int,
        experiment: dict[str, Any] | None = None,
    ) -> tuple[Experiment | None, list[Job]]:
        """Create ``jobs`` (``create_job`` keyword arguments) and, when given, their experiment,
        all or none: refused whole with ``QuotaExceeded`` when the owner's queued jobs would
        exceed their limit (``max_queued``, or an admin's override). Serialised with every
        other submission, so two at once cannot both slip under the limit."""
        with self.session() as s:
            self._lock(s, "submit")
            limit = self._limit(s, owner, "max_queued", max_queued)
            queued = (
                s.scalar(
                    select(func.count())
                    .select_from(Job)
                    .where(_owned_by(owner), Job.state == "queued")
                )
                or 0
            )
            if limit is not None and queued + len(jobs) > limit:
                who = owner or "local"
                raise QuotaExceeded(
                    f"user {who} has {queued} queued jobs and may have at most {limit}: this "
                    f"submission of {len(jobs)} would exceed it (SYNATTN_MAX_QUEUED_PER_USER; an "
                    "admin raises it with: synattn quota set USER --queued N); cancel queued jobs "
                    "or wait for some to start"
                )
            exp = None
            if experiment is not None:
                exp = Experiment(
                    owner=owner, created_at=time.time(), **{"id": new_id(), **experiment}
                )
                s.add(exp)
            made = [
                _new_job(owner=owner, experiment_id=exp.id if exp else None, **kw) for kw in jobs
            ]
            s.add_all(made)
        return exp, made

    def create_experiment(
        self, name: str, baseline: str, spec: dict[str, Any], owner: str | None = None
    ) -> Experiment:
        exp = Experiment(
            id=new_id(), name=name, owner=owner, baseline=baseline, spec=spec,
            created_at=time.time(),
        )  # fmt: skip
        with self.session() as s:
            s.add(exp)
        return exp

    # ------------------------------------------------------------ reading
    def get(self, job_id: str) -> Job | None:
        with self.session() as s:
            return s.get(Job, job_id)

    def jobs(
        self,
        state: str | Sequence[str] | None = None,
        experiment_id: str | None = None,
        kind: str | None = None,
        limit: int = 1000,
        owner: str | None = None,
    ) -> Sequence[Job]:
        """Jobs, oldest first; ``state`` one state or several; ``owner`` given: only that
        user's."""
        q = select(Job).order_by(Job.created_at).limit(limit)
        if owner is not None:
            q = q.where(Job.owner == owner)
        states = [state] if isinstance(state, str) else list(state or ())
        if any(states):
            q = q.where(Job.state.in_(states))
        if experiment_id:
            q = q.where(Job.experiment_id == experiment_id)
        if kind:
            q = q.where(Job.kind == kind)
        with self.session() as s:
            return s.scalars(q).all()

    def experiment(self, ref: str, owner: str | None = None) -> Experiment | None:
        """An experiment by id, or the newest one of that name (``owner`` given: theirs only)."""
        with self.session() as s:
            exp = s.get(Experiment, ref)
            if exp is not None and owner is not None and exp.owner != owner:
                exp = None
            if exp is None:
                q = select(Experiment).where(Experiment.name == ref)
                if owner is not None:
                    q = q.where(Experiment.owner == owner)
                exp = s.scalars(q.order_by(Experiment.created_at.desc())).first()
            return exp

    def experiments(self, owner: str | None = None) -> Sequence[Experiment]:
        q = select(Experiment).order_by(Experiment.created_at)
        if owner is not None:
            q = q.where(Experiment.owner == owner)
        with self.session() as s:
            return s.scalars(q).all()

    def prioritise(self, job_ids: Sequence[str], priority: int) -> int:
        """Give queued jobs a priority (within their owner's jobs the highest is released
        first, then the oldest); the number changed: a running or finished job keeps its own."""
        if not job_ids:
            return 0
        stmt = (
            update(Job)
            .where(Job.id.in_(list(job_ids)), Job.state == "queued")
            .values(priority=priority)
        )
        with self.session() as s:
            return _rowcount(s.execute(stmt))

    # ------------------------------------------------------------ lifecycle
    def claim(self, job_id: str, worker: str, stale_after_s: float) -> bool:
        """Take a queued job (or a running one whose worker went silent) for ``worker``.

        One conditional UPDATE, so two deliveries of the same task cannot both win. A job
        claimed before adds its last claim's span (start to last heartbeat) to
        ``earlier_claims_s``: SET reads the row as it was, on SQLite and PostgreSQL alike.
        """
        now = time.time()
        last_claim = func.coalesce(Job.heartbeat_at - Job.started_at, 0.0)  # 0: never claimed
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.cancel_requested.is_(False))
            .where(
                (Job.state == "queued")
                | ((Job.state == "running") & (Job.heartbeat_at < now - stale_after_s))
            )
            .values(
                state="running",
                worker=worker,
                heartbeat_at=now,
                attempts=Job.attempts + 1,
                started_at=now,
                earlier_claims_s=func.coalesce(Job.earlier_claims_s, 0.0) + last_claim,
                error=None,
            )
        )
        with self.session() as s:
            if _rowcount(s.execute(stmt)) != 1:
                return False
            job = s.get(Job, job_id)
            if job is not None:
                key = {"user": job.owner or "", "kind": job.kind}
                row = s.get(UserStart, key)
                if row is None:
                    s.add(UserStart(last_start=now, **key))
                else:
                    row.last_start = now
            return True

    def heartbeat(self, job_id: str, worker: str) -> bool:
        """Refresh the heartbeat; False when the job is no longer this worker's."""
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.worker == worker, Job.state == "running")
            .values(heartbeat_at=time.time())
        )
        with self.session() as s:
            return _rowcount(s.execute(stmt)) == 1

    def set_progress(self, job_id: str, progress: dict[str, Any]) -> None:
        with self.session() as s:
            job = s.get(Job, job_id)
            if job is not None:
                job.progress = {**(job.progress or {}), **progress}
                job.heartbeat_at = time.time()

    def finish(
        self,
        job_id: str,
        state: JobState,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        worker: str | None = None,
    ) -> bool:
        """Move a running job to a final state (only the worker that holds it may)."""
        stmt = update(Job).where(Job.id == job_id, Job.state == "running")
        if worker is not None:
            stmt = stmt.where(Job.worker == worker)
        values: dict[str, Any] = {"state": state, "finished_at": time.time(), "error": error}
        if result is not None:
            values["result"] = result
        with self.session() as s:
            return _rowcount(s.execute(stmt.values(**values))) == 1

    def adopt_finished(
        self,
        job_id: str,
        result: dict[str, Any],
        started_at: float | None,
        finished_at: float | None,
        attempts: int = 1,
        earlier_claims_s: float | None = None,
    ) -> bool:
        """Record a queued job as already succeeded elsewhere (a run published by an earlier
        session of a study, synattn study run): its result and timing (``earlier_claims_s``:
        the claims before its last one), no worker. Only a job still queued is taken, so a job
        a worker claimed meanwhile trains as usual."""
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.state == "queued")
            .values(
                state="succeeded",
                result=result,
                started_at=started_at,
                finished_at=finished_at,
                attempts=attempts,
                earlier_claims_s=earlier_claims_s,
                error=None,
            )
        )
        with self.session() as s:
            return _rowcount(s.execute(stmt)) == 1

    def release(self, job_id: str, worker: str, error: str) -> None:
        """Give a running job back to the queue (a transient error, retried later); the caller
        sends its task again itself, so it counts as released to the broker. Its heartbeat is
        set to now, the end of this claim, which the next claim counts into the job's wall."""
        now = time.time()
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.worker == worker, Job.state == "running")
            .values(state="queued", error=error, worker=None, released_at=now, heartbeat_at=now)
        )
        with self.session() as s:
            s.execute(stmt)

    def request_cancel(self, job_id: str) -> Job | None:
        """Flag a job; a queued job is cancelled at once, a running one at its next step."""
        with self.session() as s:
            job = s.get(Job, job_id)
            if job is None:
                return None
            if job.state in TERMINAL:
                return job
            job.cancel_requested = True
            if job.state == "queued":
                job.state = "cancelled"
                job.finished_at = time.time()
            return job

    def requeue_cancelled(self, job_ids: Sequence[str]) -> list[str]:
        """Put cancelled jobs back on the queue, to be dispatched as any waiting job; one that
        saved its state when it stopped resumes from it. Returns the ids put back (a job in
        another state keeps it): one conditional UPDATE, whose RETURNING names exactly the
        rows it changed."""
        if not job_ids:
            return []
        stmt = (
            update(Job)
            .where(Job.id.in_(list(job_ids)), Job.state == "cancelled")
            .values(state="queued", cancel_requested=False, worker=None, finished_at=None,
                    released_at=None, error=None)
            .returning(Job.id)
        )  # fmt: skip
        with self.session() as s:
            return list(s.scalars(stmt))

    def cancel_requested(self, job_id: str) -> bool:
        with self.session() as s:
            return bool(s.scalar(select(Job.cancel_requested).where(Job.id == job_id)))

    def requeue_stale(self, stale_after_s: float) -> list[str]:
        """Running jobs whose heartbeat stopped (a killed worker) go back to ``queued``: one
        conditional UPDATE, so a job whose heartbeat comes back meanwhile keeps running, and
        RETURNING names exactly the jobs put back."""
        cutoff = time.time() - stale_after_s
        stmt = (
            update(Job)
            .where(Job.state == "running", Job.heartbeat_at < cutoff)
            .values(state="queued", worker=None, error="worker lost; requeued", released_at=None)
            .returning(Job.id)
        )
        with self.session() as s:
            return list(s.scalars(stmt))

    def take_turn(self, task: str, every_s: float) -> bool:
        """Whether the caller should do the periodic ``task`` now: true for one caller per
        ``every_s`` among every process that shares this store, so N processes each with a
        timer (every running Slurm job, the job API) do it once per period, not N times. The
        task's ``locks`` row holds when it was last taken; moving it on is one atomic UPDATE."""
        now = time.time()
        stmt = update(Lock).where(Lock.name == task, Lock.at <= now - every_s).values(at=now)
        with self.session() as s:
            return _rowcount(s.execute(stmt)) == 1

    # ------------------------------------------------------------ tokens
    def create_token(self, name: str, admin: bool = False) -> str:
        """A new random bearer token; only its digest is stored, so show it once."""
        token = "sya_" + secrets.token_urlsafe(32)
        with self.session() as s:
            s.add(
                ApiToken(
                    name=name, digest=token_digest(token), created_at=time.time(), admin=admin
                )
            )
        return token

    def check_token(self, token: str) -> Principal | None:
        """Who holds ``token`` when it is valid, else None (lookup by digest only)."""
        digest = token_digest(token)
        with self.session() as s:
            row = s.scalars(
                select(ApiToken).where(ApiToken.digest == digest, ApiToken.revoked.is_(False))
            ).first()
            return None if row is None else Principal(row.name, bool(row.admin))

    def revoke_token(self, name: str) -> int:
        with self.session() as s:
            return _rowcount(
                s.execute(update(ApiToken).where(ApiToken.name == name).values(revoked=True))
            )
