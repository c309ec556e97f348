"""A Celery worker process started from this one: ``synattn worker``, ``synattn experiment run
--embedded-worker`` and ``synattn study run`` all start theirs here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def worker_env(queues: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment of a worker process for ``queues``: ``environ``, plus the training
    allocator's settings when it takes training jobs."""
    from synattn_jobs.allocator import training_env

    if "train" not in (q.strip() for q in queues.split(",")):
        return environ
    return {**environ, **training_env(environ)}


def start_worker(queues: str = "parse,train", extra_env: dict[str, str] | None = None,
                 log: Path | None = None, name: str | None = None,
                 ) -> subprocess.Popen[bytes]:  # fmt: skip
    """A Celery worker process (solo pool: one task at a time, no fork) for these settings; one
    that trains starts with an allocator that keeps freed pages (``synattn_jobs.allocator``).
    Its output goes to ``log``, or where this process's own goes (a container's log)."""
    cmd = [sys.executable, "-m", "celery", "-A", "synattn_jobs.worker", "worker", "-Q", queues,
           "--pool", "solo", "--concurrency", "1", "--loglevel", "INFO",
           "--without-gossip", "--without-mingle", *(["-n", name] if name else [])]  # fmt: skip
    env = worker_env(queues, {**os.environ, **(extra_env or {})})
    out = open(log, "ab") if log else None  # noqa: SIM115
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
