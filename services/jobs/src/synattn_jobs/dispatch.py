"""Fair share: queued jobs wait in the job store and are handed to the broker one free worker
slot at a time, the next one always from the user with the fewest running processes (a job
of N processes counts N, in the share and in the running quota alike).

Why not the broker's FIFO queue: one user's 200-job grid would put every colleague's job behind
it. Slurm's fair-share factor, Kueue's fair sharing and HTCondor's user priorities solve this by
choosing the next job when a slot frees, not when jobs are submitted; this does the same.
``JobStore.release_next`` makes the choice under a lock row (a row lock on PostgreSQL, the write
lock on SQLite), so API and worker processes can dispatch at once; the task is sent after the
choice commits. A dispatcher killed between the two leaves a job marked released whose task
was never sent: ``release_timeout_s`` later it waits in the store again and is released anew
(a task sent twice is harmless: a job is claimed once). Workers register with their queues and
slots and dispatch when they start, after every task and on every reaper pass; a submission
dispatches too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from synattn_jobs.settings import JobSettings, get_settings
from synattn_jobs.store import JobStore

KINDS = ("parse", "train")


def dispatch(
    store: JobStore,
    settings: JobSettings | None = None,
    kinds: Iterable[str] = KINDS,
    *,
    send: Callable[[str, str], None],
) -> list[str]:
    """Release as many queued jobs as there are free worker slots, fairly, and ``send`` each
    one's task (``synattn_jobs.worker.sender``); the ids sent, in order. ``dispatch = fifo``
    sends at submit instead, and the Slurm executor submits to Slurm: nothing here."""
    settings = settings or get_settings()
    if settings.dispatch == "fifo" or settings.executor == "slurm":
        return []
    sent: list[str] = []
    for kind in kinds:
        released = store.release_next(
            kind, settings.dispatch_ahead, settings.stale_after_s, settings.max_running_per_user
        )
        for job_id in released:
            send(job_id, kind)
            sent.append(job_id)
    return sent
