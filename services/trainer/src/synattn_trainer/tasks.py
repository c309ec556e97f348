"""Celery task that runs one training job; the job queue (queue issue) wires it into jobs.

Start a GPU worker (one task at a time, no forking): ``celery -A synattn_trainer.tasks worker
-Q train --pool solo --concurrency 1``. A redelivered task resumes from the run directory's last
checkpoint, so running a task again never starts the training over.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from synattn_trainer.config import load_config
from synattn_trainer.train import Trainer

BROKER = os.environ.get("SYNATTN_BROKER_URL", "redis://127.0.0.1:6379/0")
BACKEND = os.environ.get("SYNATTN_RESULT_BACKEND", BROKER)

app = Celery("synattn_trainer", broker=BROKER, backend=BACKEND)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_default_queue="train",
    task_routes={"synattn.train": {"queue": "train"}},
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_transport_options={"visibility_timeout": 7 * 24 * 3600},  # longer than any run
    task_track_started=True,
)


@app.task(name="synattn.train", bind=True)
def train(
    self: Any, config: str, out_dir: str, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train (or resume) the run in ``out_dir``; progress goes to the task's meta."""
    cfg = load_config(config, overrides)
    trainer = Trainer(cfg, out_dir, progress=False)

    def report(record: dict[str, Any]) -> None:
        self.update_state(state="PROGRESS", meta=record)

    result = trainer.train(on_update=report)
    return {
        "update": result.update,
        "epoch": result.epoch,
        "best_valid_loss": result.best_valid_loss,
        "stopped": result.stopped,
        "checkpoint": None if result.checkpoint is None else str(result.checkpoint),
        "averaged": None if result.averaged is None else str(result.averaged),
    }
