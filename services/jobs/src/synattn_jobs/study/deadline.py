"""Which running runs cannot finish training before the session hands them off.

A driver with ``--hand-off-after`` stops its workers at a fixed time; a run still training
then is handed off, and where the hand-off does not reach the next session (a machine lent
for one session) its hours are lost. Machines differ by up to about 1.8x in speed, so a run
that fits on one overruns on another: the driver says so as soon as the run's own pace
shows it, while its worker could still take a shorter run (``synattn cancel`` stops the run
where it is; a driver started again, or the next checkout's from the hand-off, resumes it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from synattn_shared.progress import hms

# the pace of a run's first minutes after a claim (loading, warm-up) is no guide to its end
SETTLED_AFTER_S = 300.0


def overrun_s(progress: dict[str, Any], hand_off_at: float, now: float) -> float | None:
    """Seconds by which a training run's estimated end passes ``hand_off_at``; None when it
    ends before, or when its progress gives no estimate. The estimate is the run's training
    alone: the translation of the evaluation split comes after it."""
    eta = progress.get("eta_s")
    if progress.get("phase", "train") != "train" or eta is None:
        return None
    late = now + float(eta) - hand_off_at
    return late if late > 0 else None


def update_at(progress: dict[str, Any], hand_off_at: float, now: float) -> int | None:
    """The update a run at its present pace reaches by ``hand_off_at``."""
    update, most, eta = progress.get("update"), progress.get("max_updates"), progress.get("eta_s")
    if update is None or not most or not eta:
        return None
    rate = (int(most) - int(update)) / float(eta)  # updates per second
    return min(int(most), int(update) + int(rate * max(hand_off_at - now, 0.0)))


def pace_here(samples: Sequence[tuple[str, float]], published: Sequence[Mapping[str, Any]],
              variant: str | None = None) -> float | None:  # fmt: skip
    """How many times faster than the published runs this machine trains: the median, over
    ``(variant, target tokens per second)`` measured here, of each rate over its variant's
    median published rate; for ``variant``, its own samples alone when it has any (variants
    gain unequally from a faster machine). None when no sample's variant has a published
    rate."""
    own = [(v, rate) for v, rate in samples if v == variant]
    ratios = []
    for measured, rate in own or samples:
        ref = _rates(measured, published)
        if ref and rate > 0:
            ratios.append(rate / statistics.median(ref))
    return statistics.median(ratios) if ratios else None


def expected_wall_s(variant: str, published: Sequence[Mapping[str, Any]],
                    pace: float) -> float | None:  # fmt: skip
    """The wall time a run of ``variant`` should take here, translation included: the
    published runs' median work (wall time times target tokens per second, the same for every
    run of a variant on any machine) over the variant's median published rate times
    ``pace``. None when the variant has no published run."""
    runs = [r for r in published if r.get("variant") == variant
            and r.get("wall_s") and r.get("tokens_per_s")]  # fmt: skip
    if not runs or pace <= 0:
        return None
    work = statistics.median(float(r["wall_s"]) * float(r["tokens_per_s"]) for r in runs)
    return work / (statistics.median(_rates(variant, runs)) * pace)


def too_long(variant: str, published: Sequence[Mapping[str, Any]], pace: float | None,
             left_s: float) -> str | None:  # fmt: skip
    """Why a run of ``variant`` started now would still be running at the hand-off,
    ``left_s`` seconds away; None when it should end before, or when the published runs do
    not tell its length (the run was named to start, so it starts). With no ``pace`` (no run
    measured here has a published variant yet, as when a session's first runs are new
    variants) it is judged at the published runs' own pace, the only length known: a run
    started into a hand-off that does not reach the next session loses every hour it
    trains."""
    need = expected_wall_s(variant, published, 1.0 if pace is None else pace)
    if need is None or need <= left_s:
        return None
    at = ("the published runs' pace (none measured here yet)" if pace is None
          else f"this machine's pace ({pace:.2f}x the published runs')")  # fmt: skip
    return f"needs about {hms(need)} at {at}, the hand-off is in {hms(max(left_s, 0.0))}"


def pace_samples(jobs: Sequence[Any], since: float, now: float) -> list[tuple[str, float]]:
    """``(variant, target tokens per second)`` of the runs that measure this machine: each
    running run once it has trained ``SETTLED_AFTER_S`` in its claim, and each run finished
    since ``since`` (this driver's start)."""
    out = []
    for job in jobs:
        rate = None
        if job.state == "running" and now - float(job.started_at or now) >= SETTLED_AFTER_S:
            rate = (job.progress or {}).get("tokens_per_s")
        elif job.state == "succeeded" and float(job.finished_at or 0.0) >= since:
            rate = (job.result or {}).get("tokens_per_s")
        if job.variant and rate:
            out.append((str(job.variant), float(rate)))
    return out


def _rates(variant: str, published: Sequence[Mapping[str, Any]]) -> list[float]:
    return [float(r["tokens_per_s"]) for r in published
            if r.get("variant") == variant and r.get("tokens_per_s")]  # fmt: skip


def overrunning(jobs: Sequence[Any], hand_off_at: float, now: float) -> list[tuple[str, str]]:
    """``(run, line)`` for each running run that will still be training at ``hand_off_at``,
    once it has trained ``SETTLED_AFTER_S`` in this claim: the line gives its update, its
    training's estimated time left, the time left to the hand-off and the update it will have
    reached by then."""
    out = []
    for job in jobs:
        p: dict[str, Any] = job.progress or {}
        if job.state != "running" or now - float(job.started_at or now) < SETTLED_AFTER_S:
            continue
        if overrun_s(p, hand_off_at, now) is None:
            continue
        at = update_at(p, hand_off_at, now)
        near = f", near update {at:,}" if at is not None else ""
        out.append((job.name, (
            f"{job.name} will not finish training before the hand-off: update "
            f"{int(p.get('update') or 0):,}/{int(p.get('max_updates') or 0):,}, ETA "
            f"{hms(float(p['eta_s']))}, the hand-off in {hms(max(hand_off_at - now, 0.0))}"
            f"{near}; a hand-off keeps its work only where --hand-off-dir reaches the next "
            f"session, and `synattn cancel {job.id}` frees its worker now (a driver started "
            "again resumes it)"
        )))  # fmt: skip
    return out
