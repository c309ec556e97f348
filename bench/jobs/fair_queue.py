"""Fair dispatch at scale: 10,000 queued jobs from 20 users on PostgreSQL (issue 30).

Two figures, each beside today's direct enqueue (``SYNATTN_DISPATCH=fifo``) in the same run:

- **decision time**: one ``JobStore.release_next`` (lock, per-user counts, the fair choice, the
  release) with 10,000 jobs waiting and one free slot; p50 and p99 over ``--decisions`` calls.
  Direct enqueue makes no decision; its figure is the store insert + broker send of one job.
- **slot to start**: a real Celery worker (solo pool, Redis broker, PostgreSQL store) runs
  ``--jobs`` jobs that end at once (their spec is empty: claimed, then failed); the time from one
  job's end to the next one's claim, p50 and p99. With fair dispatch the worker's own
  post-task dispatch releases the next job; with direct enqueue it is already in the broker.

Needs PostgreSQL on 127.0.0.1:5432 and Redis on 6379 (``.ci/services.sh`` starts both); uses a
database of its own (dropped afterwards) and Redis database 13 (flushed).

(Named fair_queue.py, not queue.py: a ``bench/queue.py`` would shadow the standard library's
``queue`` module for every script in ``bench/``, torch's imports included.)

    python bench/jobs/fair_queue.py [--queued 10000] [--users 20] [--jobs 300] [--decisions 200]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS = "redis://127.0.0.1:6379/13"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def fill(store: Any, queued: int, users: int) -> None:
    """``queued`` waiting train jobs, round-robin over ``users`` (bulk insert)."""
    from synattn_jobs.store import Job, _new_job

    rows = []
    for k in range(queued):
        job = _new_job("train", f"j{k}", {}, "/tmp/none", owner=f"user{k % users:02d}")
        job.created_at = time.time() + k * 1e-6
        rows.append({c.name: getattr(job, c.name) for c in Job.__table__.columns})
    with store.engine.begin() as conn:
        conn.execute(Job.__table__.insert(), rows)


def decisions(store: Any, n: int) -> list[float]:
    """Milliseconds per fair decision with one free slot (the released job then 'finishes')."""
    from sqlalchemy import update

    from synattn_jobs.store import Job

    store.register_worker("bench", "train", 1)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        (job_id,) = store.release_next("train", 0, 3600, None)
        out.append((time.perf_counter() - t0) * 1000)
        with store.session() as s:
            s.execute(update(Job).where(Job.id == job_id)
                      .values(state="succeeded", started_at=time.time()))  # fmt: skip
    store.unregister_worker("bench")
    return out


def direct_submits(store: Any, n: int) -> list[float]:
    """Milliseconds per job for today's path: insert, then send its task to the broker."""
    from synattn_jobs.worker import enqueue

    out = []
    for k in range(n):
        t0 = time.perf_counter()
        job = store.create_job("train", f"d{k}", {}, "/tmp/none", owner="direct")
        enqueue(job.id, "train")
        out.append((time.perf_counter() - t0) * 1000)
    return out


def slot_to_start(env: dict[str, str], store: Any, jobs: int, mode: str) -> list[float]:
    """Run a worker until ``jobs`` jobs have ended; gaps between an end and the next claim."""
    from synattn_jobs.store import Job

    log = open(Path(env["SYNATTN_HOME"]) / f"worker-{mode}.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "synattn_jobs.worker", "worker", "-Q", "train",
         "--pool", "solo", "--concurrency", "1", "--without-gossip", "--without-mingle",
         "--loglevel", "WARNING", "-n", f"bench-{mode}-{uuid.uuid4().hex[:6]}@%h"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            with store.session() as s:
                done = s.query(Job).filter(Job.state == "failed").count()
            if done >= jobs + 5:
                break
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    with store.session() as s:
        ran = s.query(Job).filter(Job.state == "failed").order_by(Job.started_at).all()
    gaps = [(b.started_at - a.finished_at) * 1000 for a, b in itertools.pairwise(ran[5:])]
    return gaps[:jobs]


def run(mode: str, args: argparse.Namespace) -> dict[str, list[float]]:
    import psycopg
    import redis

    name = f"synattn_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    redis.Redis.from_url(REDIS).flushdb()
    home = Path(tempfile.mkdtemp(prefix=f"queue-bench-{mode}-"))
    env = {**os.environ, "SYNATTN_HOME": str(home), "SYNATTN_DATA_ROOT": str(REPO),
           "SYNATTN_BROKER_URL": REDIS,
           "SYNATTN_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}",
           "SYNATTN_DISPATCH": mode, "SYNATTN_HEARTBEAT_S": "5", "SYNATTN_STALE_AFTER_S": "60",
           "SYNATTN_MAX_QUEUED_PER_USER": str(args.queued)}  # fmt: skip
    os.environ.update(env)
    from synattn_jobs.settings import get_settings
    from synattn_jobs.store import JobStore

    get_settings.cache_clear()
    import synattn_jobs.worker as w

    w._app, w._store = None, None
    store = JobStore(env["SYNATTN_DATABASE_URL"])
    try:
        fill(store, args.queued, args.users)
        out: dict[str, list[float]] = {}
        if mode == "fair":
            out["decision"] = decisions(store, args.decisions)
        else:
            out["decision"] = direct_submits(store, args.decisions)
            from synattn_jobs.store import Job

            with store.session() as s:
                ids = [j for (j,) in s.query(Job.id).filter(Job.owner != "direct")
                       .order_by(Job.created_at)]  # fmt: skip
            for job_id in ids[: args.jobs + 50]:
                w.enqueue(job_id, "train")
        out["slot_to_start"] = slot_to_start(env, store, args.jobs, mode)
        return out
    finally:
        store.engine.dispose()
        with psycopg.connect(ADMIN, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        redis.Redis.from_url(REDIS).flushdb()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--queued", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--decisions", type=int, default=200)
    args = ap.parse_args()
    results = {mode: run(mode, args) for mode in ("fair", "fifo")}
    print(f"{args.queued} queued jobs from {args.users} users, PostgreSQL store, Redis broker, "
          "one solo worker")  # fmt: skip
    for key, label in (("decision", "dispatch decision (fifo: insert + send one job)"),
                       ("slot_to_start", "worker slot free -> next job started")):  # fmt: skip
        f, d = results["fair"][key], results["fifo"][key]
        ratio = statistics.median(f) / statistics.median(d)
        print(f"{label}: fair p50 {pct(f, .5):.1f} ms, p99 {pct(f, .99):.1f} ms (n={len(f)}); "
              f"direct enqueue p50 {pct(d, .5):.1f} ms, p99 {pct(d, .99):.1f} ms (n={len(d)}); "
              f"p50 ratio fair/direct {ratio:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
