"""The Celery app: queues ``parse`` and ``train``; tasks carry a job id, the job store the rest.

Start a worker with ``synattn worker --queues train`` (or ``celery -A synattn_jobs.worker
worker -Q train --pool solo --concurrency 1``). Settings chosen for hours-long tasks: late acks,
reject on worker loss, prefetch 1, a Redis visibility timeout longer than any run, and on top of
that a heartbeat per running job: a reaper thread in every worker puts jobs whose worker went
silent (``kill -9``, a lost node) back on the queue, and they resume from their last checkpoint.
A task claims its job with one conditional UPDATE, so redeliveries never run a job twice.

A restart of the job store's database (PostgreSQL going down for seconds) does not fail a job:
progress and cancel checks are skipped while it is unreachable, and the claim and the outcome
are retried with backoff for up to ``SYNATTN_STORE_OUTAGE_S``.

Nothing is built at import: the app (and the settings it reads) is made on first use, and
``celery -A synattn_jobs.worker`` finds it through the module attribute ``app``.

Multi-process training jobs (``resources.processes``: N > 1) go to the queue ``train.N``, which
only workers owning N devices or more (``SYNATTN_WORKER_DEVICES``) consume; such a worker runs
them under ``torchrun`` (``synattn_jobs.ddp``). Each worker advertises its devices in the job
store with its registration beat, where the job API reads them to refuse a job no live worker
could run.

Shutdown: on SIGTERM or SIGINT (a warm shutdown) a running training job stops at its next
update, saves a checkpoint and goes back on the queue; it resumes on another worker. With
``SYNATTN_WORKER_ONCE=1`` (``synattn worker --once``) a process runs exactly one job: any
further delivery is handed back to the queue untouched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery, signals
from celery.exceptions import Reject
from kombu.entity import Queue
from sqlalchemy.exc import InterfaceError, OperationalError

from synattn_jobs.errors import Cancelled
from synattn_jobs.failure import failure_text
from synattn_jobs.settings import JobSettings, get_settings
from synattn_jobs.specs import MAX_PROCESSES
from synattn_jobs.store import Job, JobState, JobStore

log = logging.getLogger("synattn.jobs")
TASK_FOR_KIND = {"parse": "synattn.jobs.parse", "train": "synattn.jobs.train"}
SHUTTING_DOWN = threading.Event()  # set by a warm shutdown: running jobs stop and requeue
RAN_ONE = threading.Event()  # a --once process has taken its job


def queue_for(kind: str, processes: int = 1) -> str:
    """The broker queue of a job: its kind, and for N > 1 processes ``train.N``."""
    return kind if processes <= 1 else f"{kind}.{processes}"


def make_app(settings: JobSettings) -> Celery:
    """A Celery app for these settings (the broker: Redis, or SQLite when embedded)."""
    app = Celery("synattn_jobs", broker=settings.broker_url)
    sized = [Queue(queue_for("train", n)) for n in range(2, MAX_PROCESSES + 1)]
    app.conf.update(
        task_queues=[Queue("parse"), Queue("train"), *sized],
        task_default_queue="train",
        task_routes={
            TASK_FOR_KIND["parse"]: {"queue": "parse"},
            "synattn.parse_shard": {"queue": "parse"},
            TASK_FOR_KIND["train"]: {"queue": "train"},
        },
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,  # the job store holds results
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # kombu's SQLAlchemy transport hands its options to create_engine: Redis ones only
        broker_transport_options=(
            {} if settings.embedded else {"visibility_timeout": settings.visibility_timeout_s}
        ),
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app


_app: Celery | None = None
_store: JobStore | None = None


def get_app() -> Celery:
    """The process's Celery app, built on first use from ``SYNATTN_*`` settings."""
    global _app
    if _app is None:
        _app = make_app(get_settings())
        register_tasks(_app)
    return _app


def __getattr__(name: str) -> Any:
    """``synattn_jobs.worker.app`` (what ``celery -A synattn_jobs.worker`` reads), lazily."""
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def store() -> JobStore:
    global _store
    if _store is None:
        _store = JobStore(get_settings().database_url)
    return _store


def once_mode() -> bool:
    return os.environ.get("SYNATTN_WORKER_ONCE") == "1"


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def enqueue(job_id: str, kind: str, processes: int = 1) -> None:
    """Send a job's task to its queue (``queue_for``: a job of N processes to ``train.N``)."""
    get_app().send_task(TASK_FOR_KIND[kind], args=[job_id], queue=queue_for(kind, processes))


class Heartbeat(threading.Thread):
    """Refreshes a running job's heartbeat until stopped; notices cancel flags on the way."""

    def __init__(self, job_id: str, me: str) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{job_id}")
        self.job_id, self.me = job_id, me
        self.stop = threading.Event()
        self.lost = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(get_settings().heartbeat_s):
            try:
                if not store().heartbeat(self.job_id, self.me):
                    self.lost.set()  # requeued elsewhere or cancelled: stop working on it
            except Exception:  # a store hiccup must not kill the job; the next beat retries
                log.exception("heartbeat of %s failed", self.job_id)


def cancel_checker(job_id: str, beat: Heartbeat) -> Callable[[], bool]:
    """``should_stop`` for the trainer: reads the flag at most every ``cancel_poll_s``."""
    last = [0.0, False]

    def should_stop() -> bool:
        if beat.lost.is_set() or SHUTTING_DOWN.is_set():
            return True
        now = time.monotonic()
        if now - last[0] >= get_settings().cancel_poll_s:
            last[0] = now
            with contextlib.suppress(*STORE_DOWN):  # unreachable: train on, ask next poll
                last[1] = store().cancel_requested(job_id)
        return bool(last[1])

    return should_stop


# the job store's database unreachable or restarting (SQLite: locked); worth waiting out
STORE_DOWN: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, *STORE_DOWN)


def patiently(call: Callable[[], Any], what: str) -> Any:
    """``call()``, retried with backoff while the job store is unreachable, for up to
    ``store_outage_s``: a job's claim and outcome must outlast a database restart."""
    deadline = time.monotonic() + get_settings().store_outage_s
    delay = 0.25
    while True:
        try:
            return call()
        except STORE_DOWN as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s: the job store is unreachable (%s); retrying in %.1f s", what,
                        type(exc).__name__, delay)  # fmt: skip
            time.sleep(delay)
            delay = min(2 * delay, 5.0)


def progress_reporter(job_id: str) -> Callable[[dict[str, Any]], None]:
    """The runner's ``progress``: best effort, since the next report carries newer figures;
    while the store is unreachable the job trains on and one warning says so."""
    down = [False]

    def report(p: dict[str, Any]) -> None:
        try:
            store().set_progress(job_id, p)
        except STORE_DOWN as exc:
            if not down[0]:
                log.warning("progress of %s not recorded: the job store is unreachable (%s)",
                            job_id, type(exc).__name__)  # fmt: skip
            down[0] = True
        else:
            if down[0]:
                log.warning("progress of %s recorded again: the job store is back", job_id)
            down[0] = False

    return report


def execute(task: Any, job_id: str, kind: str) -> dict[str, Any]:
    """Claim the job, run it with a heartbeat, record the outcome. Safe to deliver twice."""
    if once_mode() and RAN_ONE.is_set():
        # this --once process has had its job: the message goes back for another worker
        raise Reject(f"job {job_id}: this --once worker has run its job", requeue=True)
    if SHUTTING_DOWN.is_set():
        raise Reject(f"job {job_id}: the worker is shutting down", requeue=True)
    s = store()
    me = worker_name()
    queued = patiently(lambda: s.get(job_id), f"read {job_id}")
    if queued is not None and (queued.processes or 1) > Registration.devices:
        # only a misrouted message gets here: a worker consumes the queues of jobs it fits
        raise Reject(f"job {job_id}: {queued.processes} processes; this worker owns "
                     f"{Registration.devices} device(s)", requeue=True)  # fmt: skip
    if not patiently(lambda: s.claim(job_id, me, get_settings().stale_after_s), f"claim {job_id}"):
        job = s.get(job_id)
        state = None if job is None else job.state
        log.info("job %s not claimed (state %s): nothing to do", job_id, state)
        return {"job": job_id, "skipped": state}
    RAN_ONE.set()
    job = patiently(lambda: s.get(job_id), f"read {job_id}")
    assert job is not None
    try:
        ran = run_claimed(s, job, me, transient=TRANSIENT)
    except TRANSIENT as exc:
        error = f"{type(exc).__name__}: {exc}"[:4000]
        patiently(lambda: s.release(job_id, me, error), f"release {job_id}")
        raise task.retry(exc=exc, countdown=min(300, 5 * 2**task.request.retries)) from exc
    if ran.state == "stopped":  # stopped by this worker, not by a cancel request
        if SHUTTING_DOWN.is_set():
            s.release(job_id, me, "worker shut down; requeued")
            enqueue(job_id, kind, job.processes or 1)  # resumes from its checkpoint elsewhere
            log.warning("job %s requeued: the worker is shutting down", job_id)
            return {"job": job_id, "state": "requeued"}
        settle(s, job_id, me, "cancelled", error=ran.why)
        return {"job": job_id, "state": "cancelled"}
    return {"job": job_id, "state": ran.state}


@dataclass(frozen=True)
class Ran:
    """How a claimed job's run ended. ``succeeded``, ``failed`` and ``cancelled`` are recorded
    in the store already; ``stopped`` (the run stopped with a resume point, but nobody asked to
    cancel it: a shutdown, a Slurm signal) and ``lost`` (another worker holds the claim now)
    are the caller's to settle."""

    state: str
    why: str = ""


def settle(s: JobStore, job_id: str, me: str, state: JobState, **outcome: Any) -> None:
    """Record the job's outcome, waiting out a store outage."""
    patiently(lambda: s.finish(job_id, state, worker=me, **outcome), f"finish {job_id}")


def run_claimed(
    s: JobStore,
    job: Job,
    me: str,
    stop_also: Callable[[], bool] | None = None,
    transient: tuple[type[BaseException], ...] = (),
) -> Ran:
    """Run a job ``me`` has claimed, with its heartbeat and cancel flag, and record how it
    ended: what a Celery worker and a Slurm batch step both do with a claimed job.
    ``stop_also``: another reason to stop at the next update (a Slurm signal); ``transient``:
    errors raised to the caller, which retries the job rather than failing it."""
    from synattn_jobs import runners

    beat = Heartbeat(job.id, me)
    beat.start()
    flag = cancel_checker(job.id, beat)

    def should_stop() -> bool:
        return (stop_also is not None and stop_also()) or flag()

    try:
        result = runners.run_job(job.kind, job.spec, Path(job.out_dir),
                                 progress_reporter(job.id), should_stop)  # fmt: skip
    except Cancelled as exc:
        if s.cancel_requested(job.id):
            settle(s, job.id, me, "cancelled", error=str(exc))
            return Ran("cancelled")
        return Ran("stopped", str(exc))
    except transient:
        raise
    except Exception as exc:  # a bad configuration is never retried; its cause comes first
        settle(s, job.id, me, "failed", error=failure_text(exc))  # (synattn_jobs.failure)
        return Ran("failed")
    finally:
        beat.stop.set()
    if beat.lost.is_set():
        return Ran("lost")
    settle(s, job.id, me, "succeeded", result=result)
    return Ran("succeeded")


def train_job(task: Any, job_id: str) -> dict[str, Any]:
    """Run (or resume) one training job."""
    return execute(task, job_id, "train")


def parse_job(task: Any, job_id: str) -> dict[str, Any]:
    """Run (or resume) one parse job."""
    return execute(task, job_id, "parse")


def register_tasks(app: Celery) -> None:
    """The job tasks, and the shard task where the parser is installed (its one definition
    lives in ``synattn_parser.tasks``; a trainer-only image has no parser)."""
    retries = get_settings().max_retries
    app.task(name=TASK_FOR_KIND["train"], bind=True, max_retries=retries)(train_job)
    app.task(name=TASK_FOR_KIND["parse"], bind=True, max_retries=retries)(parse_job)
    try:
        from synattn_parser.tasks import add_shard_task
    except ImportError:
        return
    add_shard_task(app)


def sender(jobs: JobStore) -> Callable[[str, str], None]:
    """What the fair dispatcher sends a released job with: its task, to its queue."""

    def send(job_id: str, kind: str) -> None:
        enqueue(job_id, kind, jobs.processes([job_id]).get(job_id, 1))

    return send


def dispatch_now() -> list[str]:
    """Release queued jobs to free worker slots (fair share; ``synattn_jobs.dispatch``)."""
    from synattn_jobs.dispatch import dispatch

    return dispatch(store(), get_settings(), send=sender(store()))


def reap_once() -> list[str]:
    """Requeue the jobs whose worker stopped beating; with fair dispatch they wait for a free
    slot like any queued job (a release whose task was never sent is repeated too)."""
    settings = get_settings()
    requeued = store().requeue_stale(settings.stale_after_s)
    for job_id in requeued:
        job = store().get(job_id)
        if job is not None:
            log.warning("job %s lost its worker; requeued", job_id)
            if settings.dispatch == "fifo":
                enqueue(job_id, job.kind, job.processes or 1)
    if settings.dispatch == "fair":
        store().unrelease_stale(settings.release_timeout_s)
        dispatch_now()
    return requeued


class Registration:
    """This worker process as the fair dispatcher and the job API see it: its queues, task
    slots and devices (the most processes a job it takes may have)."""

    queues: str = ""
    slots: int = 1
    devices: int = 1

    @classmethod
    def beat(cls) -> None:
        if cls.queues and not SHUTTING_DOWN.is_set():
            store().register_worker(worker_name(), cls.queues, cls.slots, cls.devices)


class Reaper(threading.Thread):
    """Every half ``stale_after_s`` inside each worker process: this worker's registration
    beat, then ``reap_once`` (requeue lost jobs, dispatch)."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="synattn-reaper")

    def run(self) -> None:
        while True:
            try:
                Registration.beat()
                reap_once()
            except Exception:
                log.exception("reaper pass failed")
            time.sleep(max(0.5, get_settings().stale_after_s / 2))


def _consume_sized_queues(consumer: Any, queues: list[str]) -> int:
    """A training worker's devices (``synattn_jobs.ddp.worker_devices``); it also consumes
    ``train.2`` ... ``train.D``, the queues of the multi-process jobs it can run."""
    if "train" not in queues:
        return 1
    from synattn_jobs.ddp import gpu_count, worker_devices

    devices = worker_devices(get_settings())
    gpus = gpu_count()
    if 0 < gpus < devices:
        log.warning("SYNATTN_WORKER_DEVICES=%d but this worker sees %d GPUs", devices, gpus)
    for n in range(2, devices + 1):
        consumer.add_task_queue(queue_for("train", n))
    return devices


@signals.worker_ready.connect
def _start_reaper(sender: Any = None, **_: Any) -> None:
    """Register this worker's queues, slots and devices, release work to it, start the
    reaper."""
    try:
        queues = sorted(q.name for q in sender.task_consumer.queues)
        slots = int(getattr(sender.controller, "concurrency", 1) or 1)
    except AttributeError:  # pragma: no cover - a Celery without these attributes
        queues, slots = ["parse", "train"], 1
    try:
        Registration.devices = _consume_sized_queues(sender, queues)
    except Exception:  # one-process jobs still run: the worker says it owns one device
        log.exception("could not consume the multi-process queues; this worker takes "
                      "one-process jobs only")  # fmt: skip
    queues = [q for q in queues if q in TASK_FOR_KIND]  # the kinds; devices say the rest
    Registration.queues, Registration.slots = ",".join(queues), 1 if once_mode() else slots
    try:
        Registration.beat()
        dispatch_now()
    except Exception:
        log.exception("registration or first dispatch failed; the reaper retries")
    Reaper().start()


@signals.worker_shutting_down.connect
def _stop_running_jobs(**_: Any) -> None:
    """A warm shutdown (SIGTERM, SIGINT): the running job stops at its next step, is saved
    and requeued (see ``execute``); Celery then exits once the task has returned. The worker
    leaves the dispatcher's slot count first."""
    SHUTTING_DOWN.set()
    try:
        store().unregister_worker(worker_name())
    except Exception:
        log.exception("could not unregister %s", worker_name())


@signals.task_postrun.connect
def _after_a_task(**_: Any) -> None:
    """A slot is free: release the next job to it (fair share). ``SYNATTN_WORKER_ONCE=1``: a
    warm shutdown after the first job instead (one Kubernetes Job per queued job; its task is
    acknowledged before the process exits)."""
    if once_mode() and RAN_ONE.is_set():
        import signal

        os.kill(os.getpid(), signal.SIGTERM)
        return
    if not SHUTTING_DOWN.is_set():
        try:
            dispatch_now()
        except Exception:
            log.exception("dispatch after a task failed; the reaper retries")
