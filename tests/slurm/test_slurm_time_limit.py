"""A Slurm job's time limit: signalled, checkpointed, requeued, resumed. A file of its own: it
waits for Slurm's signal (up to half a minute), beside other files' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import SlurmEnv
from tests.slurm.helpers import config, events, settled

pytestmark = pytest.mark.integration


def test_a_job_reaching_its_time_limit_is_signalled_checkpointed_requeued_and_resumed(
    slurm: SlurmEnv,
) -> None:
    """A 1-minute time limit with the signal 55 s before it (2,500 updates: long enough that
    Slurm's check, every half minute, signals it before it could end): Slurm sends SIGUSR1
    within the first half minute, the run saves at its next update, goes back to queued and
    asks Slurm to requeue it (same Slurm job id). The cluster's admin then lifts the limit, and
    the job resumes from where it stopped. (It is then cancelled: a requeued run's finish,
    equal to an uninterrupted one, is test_slurm_interruptions' requeue test.)"""
    import subprocess

    slurm.vars["SYNATTN_SLURM_SIGNAL_S"] = "55"
    cfg = str(config(slurm, "slurm-limit", max_updates=2500, checkpoint_every_updates=250,
                      average_last=2, average_window=0.5))  # fmt: skip
    job_id = slurm.cli("submit", "train", cfg, "--time-limit", "1").stdout.strip()
    slurm_job = slurm.slurm_job(job_id)
    # requeued by the job itself: its start, Slurm's check (every half minute) and its save
    # took over 90 s on a loaded machine
    slurm.release_begin_time(slurm_job, timeout=180)
    subprocess.run(["scontrol", "update", f"jobid={slurm_job}", "TimeLimit=10"],
                   env=slurm.env, check=True)  # fmt: skip
    first = slurm.store().get(job_id)
    assert first is not None
    run = Path(first.out_dir)
    stopped = [e["update"] for e in events(run) if e["event"] == "end"]
    assert len(stopped) == 1 and stopped[0] < 2500, stopped
    job = slurm.wait(job_id, {"running"}, timeout=120, update=stopped[0] + 2)
    assert (job.slurm_job, job.attempts) == (slurm_job, 2), (job.slurm_job, job.attempts)
    slurm.cli("cancel", job_id)
    job = settled(slurm, job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job.state == "cancelled", job.error
    ends = [e for e in events(run) if e["event"] == "end"]
    starts = [e for e in events(run) if e["event"] == "start"]
    log = (run / "slurm" / f"slurm-{slurm_job}.out").read_text()
    seen = f"starts {starts}\nends {ends}\n{log[-3000:]}"
    assert [e["stopped"] for e in ends] == ["cancelled", "cancelled"], seen  # signal, cancel
    # it went on from where it stopped (a signal before its first update: from update 0)
    assert starts[1]["update"] == ends[0]["update"] < ends[1]["update"], seen
    assert starts[1]["resumed"] or ends[0]["update"] == 0, seen
    assert "time limit is near; checkpointed and requeued in Slurm" in log, seen
    assert "Slurm restart 1" in log, seen
