"""What the job store holds: its tables (jobs, experiments, quotas, workers, locks, API tokens),
the states a job moves through, and the engine several processes share."""

from __future__ import annotations

import hashlib
import time
import uuid
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
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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
    # while set, the one job the dispatcher may release for this user (a study driver's
    # ``--late`` lets a single run through its hold: a gate on the job, not a count, so a run
    # ending before the driver holds again frees no place for another)
    release_only: Mapped[str | None] = mapped_column(String(32), nullable=True)


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
LOCKS = ("dispatch", "submit", "slurm-reconcile")  # the last a turn (JobStore.take_turn)
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
    ("quotas", "release_only", "VARCHAR(32)"),
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
