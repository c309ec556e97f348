"""Helpers of the Slurm executor's tests: the runs' records and models, a config of one's own,
and waiting for a job while reconciling as the job API would."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from synattn_jobs.slurm.states import ACTIVE
from tests.slurm.conftest import SlurmEnv

SYNC_EVERY_S = 10.0


def model(path: str | Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def config(slurm: SlurmEnv, name: str, **train: object) -> Path:
    """``configs/tiny.yaml`` (``tests.jobs.conftest.tiny_yaml``) with ``train`` settings of
    its own, as ``configs/<name>.yaml``."""
    base = yaml.safe_load((slurm.root / "configs" / "tiny.yaml").read_text())
    base["train"].update(train)
    path = slurm.root / "configs" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(base), encoding="utf-8")
    return path


def settled(slurm: SlurmEnv, job_id: str, states: set[str], timeout: float = 90):
    """Wait for ``states`` while reconciling as the job API would (``synattn slurm sync``):
    the store is read every half second, the CLI run once Slurm no longer runs the job's
    Slurm job (and every ``SYNC_EVERY_S`` in any case): a job that ends on its own records
    its outcome, and a CLI process a second would take a core from the job it waits for."""
    import time

    store = slurm.store()
    deadline = time.monotonic() + timeout
    synced_at = time.monotonic()
    while time.monotonic() < deadline:
        job = store.get(job_id)
        if job is not None and job.state in states:
            return job
        running = job is not None and job.slurm_job and slurm.squeue(job.slurm_job)[0] in ACTIVE
        if not running or time.monotonic() - synced_at > SYNC_EVERY_S:
            slurm.cli("slurm", "sync")
            synced_at = time.monotonic()
        time.sleep(0.5)
    job = store.get(job_id)
    raise AssertionError(f"{job_id}: {job and job.state} {job and job.error}\n{slurm.logs()}")
