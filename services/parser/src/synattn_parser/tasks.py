"""Celery task for one shard, so a corpus can be parsed by workers on many machines.

Start a worker: ``celery -A synattn_parser.tasks worker -Q parse --concurrency 2``. Broker and
result backend come from ``SYNATTN_BROKER_URL`` / ``SYNATTN_RESULT_BACKEND`` (Redis by default).
The job queue (``synattn_queue``) plans the shards and finalises the manifest; a redelivered task
finds its shard written and returns it, so a task is safe to run twice.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from synattn_parser.batch import run_shard_payload

BROKER = os.environ.get("SYNATTN_BROKER_URL", "redis://127.0.0.1:6379/0")
BACKEND = os.environ.get("SYNATTN_RESULT_BACKEND", BROKER)

app = Celery("synattn_parser", broker=BROKER, backend=BACKEND)
app.conf.update(
    task_acks_late=True,  # a shard is acknowledged only once written
    task_reject_on_worker_lost=True,  # a killed worker's shard goes back to the queue
    worker_prefetch_multiplier=1,
    task_default_queue="parse",
    task_routes={"synattn.parse_shard": {"queue": "parse"}},
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_transport_options={"visibility_timeout": 6 * 3600},
    result_expires=7 * 24 * 3600,
)


@app.task(
    name="synattn.parse_shard",
    autoretry_for=(OSError,),  # transient: a shared volume hiccup
    retry_backoff=True,
    max_retries=5,
)
def parse_shard(job: dict[str, Any]) -> dict[str, Any]:
    """Parse and write one shard; returns its ``ShardInfo`` as a dict."""
    return run_shard_payload(job)
