"""A report row's head statistics: the HeadMask paper's Tables 5-6 (mean and variance of head
importance on the dev set, from each run's analysis) and, for HeadMask runs, how the training
masks were spread over the heads (``synattn_trainer.mask_frequency``)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from synattn_jobs.store import Job


def head_statistics(done: list[Job], metrics_of: Any) -> dict[str, Any] | None:
    """Per seed and averaged over seeds; None when no run has either statistic.

    ``metrics_of``: the function that finds a job's ``metrics.jsonl`` (``report.run_metrics``).
    """
    from synattn_trainer.mask_frequency import summary

    out: dict[str, Any] = {}
    means = [j.result["importance_mean"] for j in done if "importance_mean" in (j.result or {})]
    variances = [
        j.result["importance_variance"] for j in done if "importance_variance" in (j.result or {})
    ]
    if means:
        out["importance_mean"] = statistics.fmean(means)
        out["importance_variance"] = statistics.fmean(variances)
    masks: dict[str, Any] = {}
    for job in done:
        metrics: Path | None = metrics_of(job)
        s = summary(metrics) if metrics is not None else {}
        if s:
            last = s["windows"][-1]
            masks[str(job.seed)] = {
                "entropy_bits": s["entropy_bits"],
                "heads": len(s["run_shares"]),
                "often_masked_last_window": s["often_masked_last_window"],
                "last_window_updates": last["updates"],
                "harmful_share_last_window": last["harmful_share"],
            }
    if masks:
        out["training_masks"] = masks
    return out or None
