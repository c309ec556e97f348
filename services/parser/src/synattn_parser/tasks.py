"""The shard task (one shard of a corpus per task), defined once for every Celery app.

The job queue's app (``synattn_jobs.worker``) registers it with ``add_shard_task``; this module
also offers a stand-alone app for parser-only workers: ``celery -A synattn_parser.tasks worker
-Q parse --concurrency 2``, with broker and result backend from ``SYNATTN_BROKER_URL`` and
``SYNATTN_RESULT_BACKEND`` (Redis by default). Nothing is built at import time: the app is made
when ``app`` is first read. A redelivered task finds its shard written and returns it, so a
task is safe to run twice.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task

from synattn_parser.batch import run_shard_payload

SHARD_TASK = "synattn.parse_shard"
_app: Celery | None = None


def parse_shard(job: dict[str, Any]) -> dict[str, Any]:
    """Parse and write one shard; returns its ``ShardInfo`` as a dict."""
    return run_shard_payload(job)


def add_shard_task(app: Celery) -> Task:
    """Register the shard task on ``app`` (acknowledged late by the app's settings; OSError, a
    shared volume hiccup, is retried with backoff)."""
    task: Task = app.task(
        name=SHARD_TASK, autoretry_for=(OSError,), retry_backoff=True, max_retries=5
    )(parse_shard)
    return task


def make_app() -> Celery:
    """A parser-only Celery app (queue ``parse``) from the environment."""
    broker = os.environ.get("SYNATTN_BROKER_URL", "redis://127.0.0.1:6379/0")
    app = Celery("synattn_parser", broker=broker,
                 backend=os.environ.get("SYNATTN_RESULT_BACKEND", broker))  # fmt: skip
    app.conf.update(
        task_acks_late=True,  # a shard is acknowledged only once written
        task_reject_on_worker_lost=True,  # a killed worker's shard goes back to the queue
        worker_prefetch_multiplier=1,
        task_default_queue="parse",
        task_routes={SHARD_TASK: {"queue": "parse"}},
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_transport_options={"visibility_timeout": 6 * 3600},
        result_expires=7 * 24 * 3600,
    )
    add_shard_task(app)
    return app


def __getattr__(name: str) -> Any:
    """``app`` (what ``celery -A synattn_parser.tasks`` reads), built on first use."""
    global _app
    if name == "app":
        if _app is None:
            _app = make_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
