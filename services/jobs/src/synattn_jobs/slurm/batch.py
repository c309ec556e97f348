"""A synattn job inside its Slurm allocation: ``python -m synattn_jobs.slurm.batch JOB``.

It claims the job in the job store, runs it with the worker's runners, heartbeat and cancel
flag, and records the outcome, as a Celery worker does. Slurm's signals end it cleanly:

- SIGUSR1, ``slurm_signal_s`` before the time limit (``--signal=B:USR1@S``): the run stops
  at its next update with a resume point, the job goes back to queued and asks Slurm to
  requeue it (``scontrol requeue``, same Slurm job id); it resumes exactly where it stopped;
- SIGTERM (``scancel``, ``scontrol requeue``, preemption): the same stop and save; a job
  whose cancel flag is set ends cancelled, any other goes back to queued and the reconciler
  settles it by Slurm's state (requeued: it runs again; cancelled in Slurm: cancelled).

While it runs it also reconciles the other Slurm jobs of the store now and then, so a lost
job is noticed even when no job API is running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from typing import Any

from synattn_jobs.settings import get_settings
from synattn_jobs.slurm import commands, ledger

log = logging.getLogger("synattn.slurm")
SIGNALLED: dict[str, int] = {}  # the first of Slurm's signals this process got, by name


def _on_signal(signum: int, _frame: Any) -> None:
    SIGNALLED.setdefault(signal.Signals(signum).name, signum)


def run(job_id: str) -> int:
    """Claim and run the job; the process's exit status (0 unless the job store is gone)."""
    from synattn_jobs.worker import patiently, run_claimed, store

    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    s, slurm_job = store(), os.environ.get("SLURM_JOB_ID", "")
    me = f"slurm:{slurm_job}@{os.environ.get('SLURMD_NODENAME') or socket.gethostname()}"
    if not patiently(lambda: s.claim(job_id, me, get_settings().stale_after_s), "claim"):
        job = s.get(job_id)
        print(f"synattn job {job_id} not claimed: it is {job and job.state}", file=sys.stderr)
        return 0
    job = patiently(lambda: s.get(job_id), "read")
    assert job is not None
    if slurm_job:
        ledger.note(s, job_id, slurm_job, "RUNNING", "")
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    print(f"synattn job {job_id} ({job.name}) claimed by {me}, Slurm restart {restarts}",
          file=sys.stderr, flush=True)  # fmt: skip
    from synattn_jobs.slurm.executor import Reconciler

    Reconciler(s, get_settings()).start()
    ran = run_claimed(s, job, me, stop_also=lambda: bool(SIGNALLED))
    if ran.state == "stopped":
        _hand_back(job_id, me, slurm_job, ran.why)
    return 0


def _hand_back(job_id: str, me: str, slurm_job: str, stopped: str) -> None:
    """A run Slurm stopped (saved, see the module's doc) goes back to queued; for the time
    limit's signal it also asks Slurm to requeue it."""
    from synattn_jobs.worker import patiently, store

    s = store()
    if "SIGUSR1" in SIGNALLED:
        why = f"{stopped}: Slurm's time limit is near; checkpointed and requeued in Slurm"
        patiently(lambda: s.release(job_id, me, why), "release")
        if slurm_job:
            with contextlib.suppress(commands.SlurmError):
                commands.requeue(slurm_job)
    else:
        why = f"{stopped}: stopped by Slurm (SIGTERM: scancel, requeue or preemption); saved"
        patiently(lambda: s.release(job_id, me, why), "release")
    print(f"synattn job {job_id}: {why}", file=sys.stderr, flush=True)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if len(sys.argv) != 2:
        print("usage: python -m synattn_jobs.slurm.batch JOB_ID", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(run(sys.argv[1]))


if __name__ == "__main__":
    main()
