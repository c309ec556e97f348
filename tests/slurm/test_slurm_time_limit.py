"""A Slurm job's time limit: signalled, checkpointed, requeued, finished. A file of its own: it
waits for Slurm's signal (up to half a minute), beside other files' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import SlurmEnv
from tests.slurm.helpers import config, events, settled

pytestmark = pytest.mark.integration


def test_a_job_reaching_its_time_limit_is_signalled_checkpointed_requeued_and_finished(
    slurm: SlurmEnv,
) -> None:
    """A 1-minute time limit with the signal 55 s before it (2,500 updates: long enough that
    Slurm's check, every half minute, signals it before it could end): Slurm sends SIGUSR1
    within the first half minute, the run saves at its next update, goes back to queued and
    asks Slurm to requeue it (same Slurm job id). The cluster's admin then lifts the limit, and
    the job resumes from where it stopped and finishes."""
    import subprocess

    slurm.vars["SYNATTN_SLURM_SIGNAL_S"] = "55"
    cfg = str(config(slurm, "slurm-limit", max_updates=2500, checkpoint_every_updates=250,
                      average_last=2, average_window=0.5))  # fmt: skip
    job_id = slurm.cli("submit", "train", cfg, "--time-limit", "1").stdout.strip()
    slurm_job = slurm.slurm_job(job_id)
    slurm.release_begin_time(slurm_job, timeout=90)  # requeued by the job itself
    subprocess.run(["scontrol", "update", f"jobid={slurm_job}", "TimeLimit=10"],
                   env=slurm.env, check=True)  # fmt: skip
    job = settled(slurm, job_id, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert job.state == "succeeded", job.error
    assert job.slurm_job == slurm_job and job.attempts == 2 and job.result["update"] == 2500
    run = Path(job.out_dir)
    ends = [e for e in events(run) if e["event"] == "end"]
    starts = [e for e in events(run) if e["event"] == "start"]
    assert [e["stopped"] for e in ends] == ["cancelled", "max_updates"]  # stopped, then done
    # it goes on from where it stopped (a signal before its first update: from update 0)
    assert starts[1]["update"] == ends[0]["update"]
    assert starts[1]["resumed"] or ends[0]["update"] == 0
    log = (run / "slurm" / f"slurm-{slurm_job}.out").read_text()
    assert "time limit is near; checkpointed and requeued in Slurm" in log, log[-2000:]
    assert "Slurm restart 1" in log
