"""What ``synattn watch`` and ``synattn experiment run --wait`` say about jobs as they run.

On a terminal, a table redrawn in place; anywhere else (a log file, a pipe, CI) a table that
redraws is invisible until the end, so each job gets a plain line whenever it moves on: a new
state or phase, a newly logged update (at most one line per job every ``every`` seconds), its
BLEU. A line says what the job record holds (``Job.progress``, written by the worker's runner:
``synattn_jobs.runners``)::

    3f2a9c1b0d4e vanilla-s1: running (train) | update 200/400 (50.0%) | loss 5.123 |
    2,104 tok/s | ETA 0:01:30

(one line; wrapped here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from synattn_jobs.store import TERMINAL, Job
from synattn_shared.progress import hms


def progress_parts(job: Job, position: int | None = None) -> list[str]:
    """The figures of a job's progress, in words: queue position, update of the budget, loss,
    speed and time left while it trains, rows parsed, BLEU."""
    p: dict[str, Any] = job.progress or {}
    parts: list[str] = []
    if job.state == "queued" and position:
        parts.append(f"position {position} in the {job.kind} queue")
    if p.get("update") is not None:
        u, most = int(p["update"]), p.get("max_updates")
        parts.append(
            f"update {u:,}/{int(most):,} ({100 * u / max(int(most), 1):.1f}%)" if most
            else f"update {u:,}"
        )  # fmt: skip
    if p.get("loss") is not None:
        parts.append(f"loss {float(p['loss']):.3f}")
    if job.state == "running" and p.get("phase") == "train":
        if p.get("tokens_per_s"):
            parts.append(f"{float(p['tokens_per_s']):,.0f} tok/s")
        if p.get("eta_s") is not None:
            parts.append(f"ETA {hms(float(p['eta_s']))}")
    if p.get("rows") is not None:
        parts.append(f"{int(p['rows']):,} rows in {int(p.get('shards', 0)):,} shard(s)")
    bleu = (job.result or {}).get("bleu", p.get("bleu"))
    if bleu is not None:
        parts.append(f"BLEU {float(bleu):.2f}")
    return parts


def state_text(job: Job) -> str:
    """``running (translate valid (average))``: the state, and a running job's phase."""
    phase = (job.progress or {}).get("phase")
    return f"{job.state} ({phase})" if job.state == "running" and phase else job.state


def progress_text(job: Job, position: int | None = None) -> str:
    """The progress column of the live table (the state is a column of its own)."""
    parts = progress_parts(job, position)
    phase = (job.progress or {}).get("phase")
    if job.state == "running" and phase and phase != "train":
        parts.append(str(phase))
    return ", ".join(parts)


def job_line(job: Job, position: int | None = None) -> str:
    """One plain line: ``ID NAME: STATE (PHASE) | figures``, and a failed job's cause
    (``synattn_jobs.failure.cause``)."""
    from synattn_jobs.failure import cause

    parts = [f"{job.id} {job.name}: {state_text(job)}", *progress_parts(job, position)]
    if job.state == "failed" and (why := cause(job.error)):
        parts.append(why[:300])
    return " | ".join(parts)


def summary_line(ref: str, jobs: Sequence[Job]) -> str:
    """``demo: 3/3 jobs done (2 succeeded, 1 failed)``."""
    done = [j for j in jobs if j.state in TERMINAL]
    counts = {s: sum(j.state == s for j in done) for s in ("succeeded", "failed", "cancelled")}
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return f"{ref}: {len(done)}/{len(jobs)} jobs done" + (f" ({said})" if said else "")


class JobLines:
    """The plain form: ``update`` with the jobs as polled prints a line for each job that
    moved on since its last line. A new state, phase or BLEU prints at once; a newly logged
    update alone prints when ``every`` seconds have passed since that job's last line."""

    def __init__(self, write: Callable[[str], None], every: float = 15.0) -> None:
        self.write = write
        self.every = every
        self._said: dict[str, tuple[Any, ...]] = {}
        self._at: dict[str, float] = {}

    def update(
        self, jobs: Sequence[Job], positions: dict[str, int], now: float | None = None
    ) -> None:
        now = time.monotonic() if now is None else now
        for job in jobs:
            p = job.progress or {}
            major = (job.state, p.get("phase"), (job.result or {}).get("bleu", p.get("bleu")))
            step = (*major, p.get("update"), p.get("rows"))
            old = self._said.get(job.id)
            if old == step:
                continue
            if old is not None and old[:3] == major and now - self._at[job.id] < self.every:
                continue  # only the figures moved, and this job had a line a moment ago
            self.write(job_line(job, positions.get(job.id)))
            self._said[job.id], self._at[job.id] = step, now
