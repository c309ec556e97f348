"""The job store: the source of truth for jobs, experiments, progress, results and API tokens.

SQLAlchemy over SQLite (default, WAL so workers and the API share it) or PostgreSQL. Celery only
carries job ids; a task claims its job here with one conditional UPDATE, so a redelivered or
requeued task never runs a job twice in parallel and never reruns a finished one.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
JobKind = Literal["parse", "train"]


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON}


class Experiment(Base):
    """A grid of training jobs (variants x seeds x hyper-parameters) compared in one report."""

    __tablename__ = "experiments"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str | None] = mapped_column(String(200), index=True, nullable=True)
    baseline: Mapped[str] = mapped_column(String(100))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class Job(Base):
    """One parse or training job; ``spec`` is what to run, the rest is what happened."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str | None] = mapped_column(String(200), index=True, nullable=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    experiment_id: Mapped[str | None] = mapped_column(
        ForeignKey("experiments.id"), index=True, nullable=True
    )
    variant: Mapped[str | None] = mapped_column(String(100), nullable=True)
    seed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    out_dir: Mapped[str] = mapped_column(Text)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    priority: Mapped[int] = mapped_column(Integer, default=0)  # orders one user's own jobs
    # data-parallel processes (resources.processes): what the job counts against its owner's
    # share and running quota, and the devices the worker that takes it must own
    processes: Mapped[int] = mapped_column(Integer, default=1)
    # queued jobs wait here until the dispatcher hands them to the broker (fair share);
    # released_at says when it did, release_count how often (a lost release is repeated)
    released_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    release_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the seconds earlier claims held the job (a killed worker's, a released one's), so that a
    # run's wall time is this plus its last claim's, not the last claim's alone
    earlier_claims_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the Slurm executor (synattn_jobs.slurm): the job's Slurm job id, and Slurm's last word on
    # it (PENDING, RUNNING, ...; the reason it waits: Priority, Resources, BeginTime)
    slurm_job: Mapped[str | None] = mapped_column(String(32), nullable=True)
    slurm_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    slurm_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)

    def as_dict(self) -> dict[str, Any]:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class Quota(Base):
    """An admin's per-user limits, overriding ``SYNATTN_MAX_{QUEUED,RUNNING}_PER_USER``."""

    __tablename__ = "quotas"
    user: Mapped[str] = mapped_column(String(200), primary_key=True)
    max_queued: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_running: Mapped[int | None] = mapped_column(Integer, nullable=True)


class WorkerSlot(Base):
    """A live worker process: the queues it serves, its task slots, the devices each slot's
    job may use (``SYNATTN_WORKER_DEVICES``), its last beat. The job API reads the devices
    of live workers to refuse a job no worker could run."""

    __tablename__ = "workers"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    queues: Mapped[str] = mapped_column(String(200))
    slots: Mapped[int] = mapped_column(Integer, default=1)
    devices: Mapped[int] = mapped_column(Integer, default=1)
    beat_at: Mapped[float] = mapped_column(Float)


class UserStart(Base):
    """When each user's last job of a kind started: the fair dispatcher's tie-break, kept
    here so a decision never scans the history of finished jobs."""

    __tablename__ = "user_starts"
    user: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    last_start: Mapped[float] = mapped_column(Float)


class Lock(Base):
    """One row per lock name; an UPDATE of it serialises dispatchers and submitters (a row
    lock on PostgreSQL, the write lock on SQLite)."""

    __tablename__ = "locks"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[float] = mapped_column(Float, default=0.0)


DISPATCH_INDEXES = (  # created on stores made before fair share too
    Index("ix_jobs_dispatch", Job.kind, Job.state, Job.released_at),
    Index("ix_jobs_owner_state", Job.owner, Job.state),
    Index("ix_jobs_next", Job.kind, Job.state, Job.owner, Job.priority, Job.created_at),
)
LOCKS = ("dispatch", "submit")
SCHEMA_LOCK_KEY = 0x53594E41  # "SYNA": PostgreSQL advisory lock held while creating tables


class QuotaExceeded(Exception):
    """A submission that would put a user over their queued-job limit (HTTP 429)."""

    def __init__(self, message: str, retry_after_s: int = 60) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ApiToken(Base):
    """A bearer token of the job API, stored as its SHA-256 digest only."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)


@dataclass(frozen=True)
class Principal:
    """Who calls: a token's name, and whether it may see every user's jobs."""

    name: str
    admin: bool = False

    def may_see(self, owner: str | None) -> bool:
        return self.admin or owner == self.name


LOCAL_ADMIN = Principal("local", admin=True)  # the CLI: it has the database itself
# columns added after the first release: (table, column, SQL type) for stores made before them
ADDED_COLUMNS = (
    ("jobs", "owner", "VARCHAR(200)"),
    ("experiments", "owner", "VARCHAR(200)"),
    ("api_tokens", "admin", "BOOLEAN NOT NULL DEFAULT FALSE"),
    ("jobs", "priority", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "released_at", "FLOAT"),
    ("jobs", "release_count", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "earlier_claims_s", "FLOAT"),
    ("jobs", "processes", "INTEGER NOT NULL DEFAULT 1"),
    ("workers", "devices", "INTEGER NOT NULL DEFAULT 1"),
    ("jobs", "slurm_job", "VARCHAR(32)"),
    ("jobs", "slurm_state", "VARCHAR(32)"),
    ("jobs", "slurm_reason", "VARCHAR(200)"),
)


def _owned_by(owner: str | None) -> Any:
    return Job.owner.is_(None) if owner is None else Job.owner == owner


def _new_job(
    kind: str,
    name: str,
    spec: dict[str, Any],
    out_dir: str,
    *,
    experiment_id: str | None = None,
    variant: str | None = None,
    seed: int | None = None,
    params: dict[str, Any] | None = None,
    owner: str | None = None,
    priority: int = 0,
    processes: int = 1,
) -> Job:
    return Job(
        id=new_id(), kind=kind, name=name, owner=owner, state="queued", spec=spec,
        out_dir=out_dir, experiment_id=experiment_id, variant=variant, seed=seed,
        params=params or {}, progress={}, result={}, attempts=0, cancel_requested=False,
        priority=priority, processes=processes, released_at=None, release_count=0,
        created_at=time.time(),
    )  # fmt: skip


def fair_order(rows: Sequence[Any], busy: dict[str, int], last: dict[str, float]) -> list[str]:
    """The order the dispatcher would release waiting jobs in, if no job finished meanwhile:
    ``rows`` are (id, user, priority, created_at[, processes]) sorted by priority (descending)
    and age; ``busy`` each user's processes in running or released jobs, ``last`` their last
    start. A job counts its processes (default 1) against its user's share."""
    import heapq

    per_user: dict[str, list[Any]] = {}
    for row in rows:
        per_user.setdefault(row[1], []).append(row)
    oldest: dict[str, list[float]] = {}  # per user: the oldest creation time from k on
    for u, js in per_user.items():
        suffix, m = [0.0] * len(js), float("inf")
        for k in range(len(js) - 1, -1, -1):
            m = min(m, float(js[k][3]))
            suffix[k] = m
        oldest[u] = suffix
    heap = [(busy.get(u, 0), last.get(u, -1.0), oldest[u][0], u, 0) for u in per_user]
    heapq.heapify(heap)
    out: list[str] = []
    tick = max([*last.values(), 0.0]) + 1.0
    while heap:
        n, _, _, user, k = heapq.heappop(heap)
        jobs = per_user[user]
        out.append(jobs[k][0])
        if k + 1 < len(jobs):
            size = int(jobs[k][4]) if len(jobs[k]) > 4 else 1
            heapq.heappush(heap, (n + size, tick, oldest[user][k + 1], user, k + 1))
            tick += 1.0
    return out


def _best_fit(free: dict[str, int], devices: dict[str, int], processes: int) -> str | None:
    """The worker with a free slot whose devices fit ``processes`` most tightly (None: no
    free slot fits): big workers stay free for big jobs."""
    fits = [w for w, k in free.items() if k > 0 and devices[w] >= processes]
    return min(fits, key=lambda w: (devices[w], w)) if fits else None


def _rowcount(result: Any) -> int:
    """Rows an UPDATE matched (SQLAlchemy types ``execute`` as a plain ``Result``)."""
    return int(result.rowcount)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(url: str) -> Engine:
    """An engine with the settings several processes sharing one store need."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    return engine


class JobStore:
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
        state: str | None = None,
        experiment_id: str | None = None,
        kind: str | None = None,
        limit: int = 1000,
        owner: str | None = None,
    ) -> Sequence[Job]:
        """Jobs, oldest first; ``owner`` given: only that user's."""
        q = select(Job).order_by(Job.created_at).limit(limit)
        if owner is not None:
            q = q.where(Job.owner == owner)
        if state:
            q = q.where(Job.state == state)
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
        session of a study, bench/reproduce.py): its result and timing (``earlier_claims_s``:
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

    def cancel_requested(self, job_id: str) -> bool:
        with self.session() as s:
            return bool(s.scalar(select(Job.cancel_requested).where(Job.id == job_id)))

    def requeue_stale(self, stale_after_s: float) -> list[str]:
        """Running jobs whose heartbeat stopped (a killed worker) go back to ``queued``."""
        cutoff = time.time() - stale_after_s
        with self.session() as s:
            ids = list(
                s.scalars(select(Job.id).where(Job.state == "running", Job.heartbeat_at < cutoff))
            )
        requeued = []
        for job_id in ids:
            stmt = (
                update(Job)
                .where(Job.id == job_id, Job.state == "running", Job.heartbeat_at < cutoff)
                .values(
                    state="queued", worker=None, error="worker lost; requeued", released_at=None
                )
            )
            with self.session() as s:
                if _rowcount(s.execute(stmt)) == 1:
                    requeued.append(job_id)
        return requeued

    # ------------------------------------------------------------ fair share
    def _lock(self, s: Session, name: str) -> None:
        s.execute(update(Lock).where(Lock.name == name).values(at=time.time()))

    def _limit(self, s: Session, owner: str | None, which: str, default: int | None) -> int | None:
        row = s.get(Quota, owner or "")
        value = None if row is None else getattr(row, which)
        return default if value is None else int(value)

    def set_quota(self, user: str, max_queued: int | None, max_running: int | None) -> Quota:
        """An admin's override for one user (None: the setting's default)."""
        with self.session() as s:
            row = s.get(Quota, user)
            if row is None:
                row = Quota(user=user)
                s.add(row)
            row.max_queued, row.max_running = max_queued, max_running
            return row

    def quotas(self) -> Sequence[Quota]:
        with self.session() as s:
            return s.scalars(select(Quota).order_by(Quota.user)).all()

    def register_worker(self, name: str, queues: str, slots: int, devices: int = 1) -> None:
        """A worker's beat: it is alive and serves ``queues`` with ``slots`` task slots, each
        running a job of up to ``devices`` processes."""
        now = time.time()
        with self.session() as s:
            row = s.get(WorkerSlot, name)
            if row is None:
                s.add(WorkerSlot(name=name, queues=queues, slots=slots, devices=devices,
                                 beat_at=now))  # fmt: skip
            else:
                row.queues, row.slots, row.devices, row.beat_at = queues, slots, devices, now

    def live_devices(self, kind: str, live_after_s: float) -> int | None:
        """The most devices a live worker of ``kind``'s queue owns (beat within
        ``live_after_s``): the largest job it can take; None while no such worker is live."""
        with self.session() as s:
            most = s.scalar(
                select(func.max(WorkerSlot.devices)).where(
                    WorkerSlot.beat_at >= time.time() - live_after_s,
                    WorkerSlot.queues.like(f"%{kind}%"),
                )
            )
        return None if most is None else int(most)

    def processes(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Each job's processes (the broker queue it goes to depends on them)."""
        if not job_ids:
            return {}
        with self.session() as s:
            return {
                j: int(n or 1)
                for j, n in s.execute(
                    select(Job.id, Job.processes).where(Job.id.in_(list(job_ids)))
                )
            }

    def running_limit(self, owner: str | None, default: int | None) -> int | None:
        """The processes ``owner``'s running jobs may have (an admin's override, else
        ``default``); None: no limit."""
        with self.session() as s:
            return self._limit(s, owner, "max_running", default)

    def unregister_worker(self, name: str) -> None:
        with self.session() as s:
            row = s.get(WorkerSlot, name)
            if row is not None:
                s.delete(row)

    def release_next(
        self, kind: str, ahead: int, live_after_s: float, max_running: int | None
    ) -> list[str]:
        """Mark the next queued jobs of ``kind`` released to the broker, as many as live
        workers have free slots (plus ``ahead``), and return their ids, in order.

        Fair share counts processes: the next job belongs to the user with the fewest
        processes in running (or released) jobs of this kind, ties to the user whose last job
        started longest ago, then to the oldest waiting job; within a user, the highest
        priority first, then the oldest, among the jobs that fit now. A job of N processes
        needs a free slot of a worker that owns N devices or more. Which slots are free is
        found by placing the jobs that hold one: a running job on its worker, a released one
        on the smallest worker it fits (largest jobs first). A smaller job may take a slot a
        larger one cannot use (backfill), so a 2-process job waits for a 2-device worker
        without holding up the 1-device ones. A user whose running limit (in processes) the
        job would pass is skipped. One dispatcher at a time (a lock row)."""
        now = time.time()
        waiting_q = (Job.kind == kind, Job.state == "queued", Job.released_at.is_(None),
                     Job.cancel_requested.is_(False))  # fmt: skip
        with self.session() as s:
            self._lock(s, "dispatch")
            workers = s.execute(
                select(WorkerSlot.name, WorkerSlot.slots, WorkerSlot.devices).where(
                    WorkerSlot.beat_at >= now - live_after_s,
                    WorkerSlot.queues.like(f"%{kind}%"),
                )
            ).all()
            free = {name: int(slots or 0) for name, slots, _ in workers}
            devices = {name: int(d or 1) for name, _, d in workers}
            spare = ahead  # releases beyond the free slots
            busy: dict[str, int] = {}
            unplaced: list[int] = []
            for owner, n, state, worker in s.execute(
                select(Job.owner, Job.processes, Job.state, Job.worker).where(*self._held(kind))
            ):
                busy[owner or ""] = busy.get(owner or "", 0) + int(n or 1)
                if state == "running" and worker in free:
                    free[worker] = max(free[worker] - 1, 0)
                else:  # released, not yet taken (or its worker is gone): somewhere it fits
                    unplaced.append(int(n or 1))
            for n in sorted(unplaced, reverse=True):
                w = _best_fit(free, devices, n)
                if w is None:
                    spare -= 1
                else:
                    free[w] -= 1
            spare = max(spare, 0)
            if not spare and not any(free.values()):
                return []
            waiting: dict[str, float] = {
                u or "": float(t)
                for u, t in s.execute(
                    select(Job.owner, func.min(Job.created_at))
                    .where(*waiting_q)
                    .group_by(Job.owner)
                )
            }
            if not waiting:
                return []
            last = self._last_starts(s, kind)
            limits = {q.user: q.max_running for q in s.scalars(select(Quota))}
            largest = max(devices.values(), default=0)
            picked: list[str] = []
            while waiting:
                room = (
                    largest
                    if spare
                    else max((devices[w] for w, k in free.items() if k > 0), default=0)
                )  # the most processes a job released now can have
                fits: dict[str, int] = {}
                for u in waiting:
                    lim = limits.get(u) if limits.get(u) is not None else max_running
                    cap = room if lim is None else min(room, lim - busy.get(u, 0))
                    if cap >= 1:
                        fits[u] = cap
                if not fits:
                    break
                user = min(fits, key=lambda u: (busy.get(u, 0), last.get(u, -1.0), waiting[u]))
                job = s.scalars(
                    select(Job).where(*waiting_q, _owned_by(user or None),
                                      func.coalesce(Job.processes, 1) <= fits[user])
                    .order_by(Job.priority.desc(), Job.created_at).limit(1)
                ).first()  # fmt: skip
                if job is None:  # nothing more of this user's is waiting, or fits now
                    del waiting[user]
                    continue
                n = int(job.processes or 1)
                w = _best_fit(free, devices, n)
                if w is None:
                    spare -= 1
                else:
                    free[w] -= 1
                job.released_at = now
                job.release_count = (job.release_count or 0) + 1
                picked.append(job.id)
                s.flush()
                busy[user] = busy.get(user, 0) + n
                last[user] = now
                if not spare and not any(free.values()):
                    break
            return picked

    @staticmethod
    def _held(kind: str) -> tuple[Any, ...]:
        """Jobs of ``kind`` that hold a worker slot: running, or released to the broker."""
        return (
            Job.kind == kind,
            (Job.state == "running") | ((Job.state == "queued") & Job.released_at.is_not(None)),
        )

    @staticmethod
    def _busy(s: Session, kind: str) -> dict[str, int]:
        """Per user: processes of the running jobs of ``kind`` and of those released to its
        broker queue."""
        return {
            u or "": int(n or 0)
            for u, n in s.execute(
                select(Job.owner, func.sum(func.coalesce(Job.processes, 1)))
                .where(*JobStore._held(kind))
                .group_by(Job.owner)
            )
        }

    @staticmethod
    def _last_starts(s: Session, kind: str) -> dict[str, float]:
        return {
            r.user: r.last_start
            for r in s.scalars(select(UserStart).where(UserStart.kind == kind))
        }

    def unrelease_stale(self, timeout_s: float) -> int:
        """Released jobs no worker took within ``timeout_s`` (a release whose task was never
        sent: the dispatcher died between the two) go back to waiting in the store."""
        with self.session() as s:
            return _rowcount(
                s.execute(
                    update(Job)
                    .where(Job.state == "queued", Job.released_at < time.time() - timeout_s)
                    .values(released_at=None)
                )
            )

    def queue(
        self, kinds: Sequence[str] = ("parse", "train"), fifo: bool = False
    ) -> dict[str, Any]:
        """Every queued job's position in the fair order (the released ones first, in release
        order, then the waiting ones as the dispatcher would pick them now; ``fifo``: the
        order of submission), and every user's counts of queued and running jobs."""
        who = func.coalesce(Job.owner, "")
        with self.session() as s:
            counts: dict[str, dict[str, int]] = {}
            for u, state, n in s.execute(
                select(who, Job.state, func.count())
                .where(Job.state.in_(("queued", "running")))
                .group_by(who, Job.state)
            ):
                counts.setdefault(u, {"queued": 0, "running": 0})[state] = int(n)
            positions: dict[str, int] = {}
            for kind in kinds:
                rows = s.execute(
                    select(Job.id, func.coalesce(Job.owner, ""), Job.priority, Job.created_at,
                           func.coalesce(Job.processes, 1))
                    .where(Job.kind == kind, Job.state == "queued", Job.released_at.is_(None),
                           Job.cancel_requested.is_(False))
                    .order_by(Job.priority.desc(), Job.created_at)
                ).all()  # fmt: skip
                released: Sequence[str] = []
                if fifo:  # every queued job is in the broker already, in submission order
                    order = [r[0] for r in sorted(rows, key=lambda r: r[3])]
                else:
                    released = s.scalars(
                        select(Job.id).where(Job.kind == kind, Job.state == "queued",
                                             Job.released_at.is_not(None))
                        .order_by(Job.released_at, Job.created_at)
                    ).all()  # fmt: skip
                    order = fair_order(rows, self._busy(s, kind), self._last_starts(s, kind))
                for k, job_id in enumerate(released):
                    positions[job_id] = k + 1
                for k, job_id in enumerate(order):
                    positions[job_id] = len(released) + k + 1
        return {"counts": counts, "positions": positions}

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
