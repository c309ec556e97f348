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
    Integer,
    String,
    Text,
    create_engine,
    event,
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
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    def as_dict(self) -> dict[str, Any]:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


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
)


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
        Base.metadata.create_all(self.engine)
        self._add_missing_columns()
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    def _add_missing_columns(self) -> None:
        """Bring a store made by an earlier release up to date (new nullable columns only)."""
        have = inspect(self.engine)
        with self.engine.begin() as conn:
            for table, column, sql_type in ADDED_COLUMNS:
                if column not in {c["name"] for c in have.get_columns(table)}:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._session.begin() as s:
            yield s

    # ------------------------------------------------------------ creating
    def create_job(
        self,
        kind: JobKind,
        name: str,
        spec: dict[str, Any],
        out_dir: str,
        *,
        experiment_id: str | None = None,
        variant: str | None = None,
        seed: int | None = None,
        params: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> Job:
        job = Job(
            id=new_id(), kind=kind, name=name, owner=owner, state="queued", spec=spec,
            out_dir=out_dir,
            experiment_id=experiment_id, variant=variant, seed=seed, params=params or {},
            progress={}, result={}, attempts=0, cancel_requested=False, created_at=time.time(),
        )  # fmt: skip
        with self.session() as s:
            s.add(job)
        return job

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

    # ------------------------------------------------------------ lifecycle
    def claim(self, job_id: str, worker: str, stale_after_s: float) -> bool:
        """Take a queued job (or a running one whose worker went silent) for ``worker``.

        One conditional UPDATE, so two deliveries of the same task cannot both win.
        """
        now = time.time()
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
                error=None,
            )
        )
        with self.session() as s:
            return _rowcount(s.execute(stmt)) == 1

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

    def release(self, job_id: str, worker: str, error: str) -> None:
        """Give a running job back to the queue (a transient error, retried later)."""
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.worker == worker, Job.state == "running")
            .values(state="queued", error=error, worker=None)
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
                .values(state="queued", worker=None, error="worker lost; requeued")
            )
            with self.session() as s:
                if _rowcount(s.execute(stmt)) == 1:
                    requeued.append(job_id)
        return requeued

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
