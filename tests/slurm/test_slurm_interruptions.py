"""Interrupted Slurm jobs lose nothing: cancel and scancel, a requeue, a node that dies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import SlurmEnv
from tests.slurm.helpers import config, events, model, settled

pytestmark = pytest.mark.integration


def test_cancel_and_scancel_keep_a_resume_point_and_a_resubmission_resumes(
    slurm: SlurmEnv,
) -> None:
    """``synattn cancel`` of a running job stops it at its next update with a resume point
    (SIGTERM to its batch step); the same job submitted with ``--out`` resumes from it; a
    plain ``scancel`` from Slurm's side cancels it too, and the next resubmission finishes
    the run."""
    # 600 updates: the tiny model trains about 50 a second, and on a loaded machine a
    # cancel took 4 s to land (the first leg stopped at update 192 of 200, and the second
    # finished before its scancel arrived)
    cfg = str(config(slurm, "slurm-cancel", max_updates=600, checkpoint_every_updates=50,
                      average_last=1, average_window=0.2))  # fmt: skip
    first = slurm.cli("submit", "train", cfg, "--name", "cancelled").stdout.strip()
    job = slurm.wait(first, {"running"}, timeout=120, update=3)
    run = Path(job.out_dir)
    slurm.cli("cancel", first)
    job = slurm.wait(first, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.state == "cancelled", job.error
    assert (run / "checkpoints" / "resume.pt").is_file()
    stopped = [e["update"] for e in events(run) if e["event"] == "end"]
    assert stopped[0] < 500, f"the cancel landed at update {stopped[0]}: no room left to scancel"

    again = slurm.cli("submit", "train", cfg, "--out", str(run)).stdout.strip()
    job = slurm.wait(again, {"running"}, timeout=120, update=stopped[0] + 2)
    import subprocess

    subprocess.run(["scancel", job.slurm_job], env=slurm.env, check=True)
    job = settled(slurm, again, {"cancelled", "failed", "succeeded"})
    assert job.state == "cancelled" and "cancelled in Slurm" in (job.error or ""), job.error

    last = slurm.cli("submit", "train", cfg, "--out", str(run)).stdout.strip()
    job = settled(slurm, last, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert job.state == "succeeded", job.error
    starts = [e for e in events(run) if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True, True]
    assert starts[1]["update"] == stopped[0] and job.result["update"] == 600


def test_a_requeued_job_resumes_to_the_parameters_of_an_uninterrupted_run(
    slurm: SlurmEnv,
) -> None:
    """``scontrol requeue`` mid-training (as an admin or a preemption would): the run saves,
    waits in the queue, starts again and resumes exactly: its final model equals that of
    the same job run without interruption beside it."""
    import subprocess

    import torch

    cfg = str(config(slurm, "slurm-requeue", max_updates=80, checkpoint_every_updates=20,
                      average_last=2, average_window=0.5))  # fmt: skip
    moved = slurm.cli("submit", "train", cfg, "--name", "requeued").stdout.strip()
    still = slurm.cli("submit", "train", cfg, "--name", "uninterrupted").stdout.strip()
    job = slurm.wait(moved, {"running"}, timeout=120, update=25)
    subprocess.run(["scontrol", "requeue", job.slurm_job], env=slurm.env, check=True)
    slurm.release_begin_time(job.slurm_job)
    done = settled(slurm, moved, {"succeeded", "failed", "cancelled"}, timeout=240)
    ref = settled(slurm, still, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert done.state == ref.state == "succeeded", (done.error, ref.error)
    starts = [e for e in events(Path(done.out_dir)) if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True] and starts[1]["update"] >= 20
    assert done.attempts == 2 and done.slurm_job == job.slurm_job  # Slurm's requeue: same id
    a, b = model(done.result["checkpoint"]), model(ref.result["checkpoint"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_node_that_dies_under_a_job_is_noticed_and_the_job_resumes_elsewhere(
    slurm: SlurmEnv, slurm_conf: Path
) -> None:
    """slurmd of the job's node and the job's processes killed (-9), as a node losing power:
    within seconds (the heartbeat's staleness, 3 s here) the reconciler notices the silent
    job, cancels its Slurm job and submits it anew away from that node; it resumes on the
    other node from its checkpoint. Never left running."""
    import os
    import signal
    import time

    import psutil

    from tests.slurm.conftest import SLURM_DIR

    job_id = slurm.cli("submit", "train", str(slurm.root / "configs" / "long.yaml")).stdout.strip()
    job = slurm.wait(job_id, {"running"}, timeout=120, update=12)
    node = slurm.squeue(job.slurm_job) and slurm.node(job.slurm_job)
    batch = [p for p in psutil.process_iter(["cmdline"])
             if p.info["cmdline"] and "synattn_jobs.slurm.batch" in p.info["cmdline"]
             and job_id in p.info["cmdline"]]  # fmt: skip
    assert len(batch) == 1
    daemon = int((SLURM_DIR / f"slurmd-{node}.pid").read_text())
    stepd = batch[0].parent()
    for proc in (daemon, stepd.pid, batch[0].pid):
        os.kill(proc, signal.SIGKILL)
    lost_at, first, store = time.monotonic(), job.slurm_job, slurm.store()
    while time.monotonic() - lost_at < 30:
        job = store.get(job_id)
        if job.state != "running":
            break
        if time.time() - (job.heartbeat_at or 0) > 3:  # stale: the job API's pass would act
            slurm.cli("slurm", "sync")
            continue
        time.sleep(0.5)
    assert job.state == "queued" and time.monotonic() - lost_at < 30, (job.state, job.error)
    assert job.slurm_job != first and f"not on {node}" in job.error, job.error
    assert "stopped beating" in job.error
    resumed = slurm.wait(job_id, {"running"}, timeout=120, update=job.progress["update"] + 2)
    assert slurm.node(resumed.slurm_job) != node
    starts = [e for e in events(Path(job.out_dir)) if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True] and starts[1]["update"] >= 10
