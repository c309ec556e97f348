"""Is a variant better than its baseline once training noise is counted? Two tests must agree.

A single training run cannot separate a method from its seed: the same configuration moves by
a BLEU point or more between seeds on small data. So a comparison is made over seeds, with the
baseline trained on the same seeds, and two tests are asked:

- a two-sided paired t-test over the per-seed BLEU differences (training noise), and
- sacreBLEU's paired bootstrap on the pooled translations (test-set sampling noise).

A variant is called ``better`` (``worse``) only when both give p < ``ALPHA`` and every seed's
difference has the same sign; anything else is ``inconclusive``. A table compares several
variants at once, so its verdicts use Holm-adjusted p-values over the table's rows (``holm``,
each test's p-values adjusted as one family): five rows at 0.05 each would otherwise call some
no-op "significant" about one table in four. With fewer than
``MIN_SEEDS`` seeds the verdict stands but the report warns in words that it is weak.

Why the sign rule matters: sacreBLEU's paired bootstrap follows multeval and gives two
*identical* outputs a small p ("a zero difference should not be attributed to chance"), so the
bootstrap alone would call a no-op variant significant; a seed whose BLEU did not move keeps
the verdict inconclusive.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

ALPHA = 0.05
MIN_SEEDS = 3


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class SeedComparison:
    """A variant against its baseline over the seeds both finished."""

    seeds: tuple[int, ...]
    diffs: tuple[float, ...]  # variant BLEU - baseline BLEU, per seed
    mean_diff: float
    seed_p: float | None  # paired t-test over seeds; None with fewer than 2 seeds
    bootstrap_p: float | None
    verdict: Verdict


def paired_t_p(diffs: Sequence[float]) -> float | None:
    """Two-sided p-value of a one-sample t-test that the mean difference is 0.

    Differences that are all equal have no spread: p is 0 when they are non-zero (every seed
    moved by the same amount) and 1 when they are all zero. None for fewer than 2 seeds.
    """
    if len(diffs) < 2:
        return None
    if any(not math.isfinite(d) for d in diffs):
        raise ValueError("BLEU differences must be finite")
    if statistics.pstdev(diffs) == 0.0:
        return 0.0 if diffs[0] != 0 else 1.0
    from scipy.stats import ttest_1samp

    return float(ttest_1samp(list(diffs), 0.0).pvalue)


def decide(
    diffs: Sequence[float], seed_p: float | None, bootstrap_p: float | None, alpha: float = ALPHA
) -> Verdict:
    """The verdict from per-seed differences and both p-values (see the module docstring)."""
    if not diffs or seed_p is None or bootstrap_p is None:
        return Verdict.INCONCLUSIVE
    if seed_p >= alpha or bootstrap_p >= alpha:
        return Verdict.INCONCLUSIVE
    if all(d > 0 for d in diffs):
        return Verdict.BETTER
    if all(d < 0 for d in diffs):
        return Verdict.WORSE
    return Verdict.INCONCLUSIVE


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None entries are not tests and
    stay None): the k-th smallest of m becomes ``max_{j<=k} min(1, (m - j + 1) p_(j))``."""
    tests = sorted((p, k) for k, p in enumerate(p_values) if p is not None)
    m = len(tests)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, k) in enumerate(tests):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-value {p} is not in [0, 1]")
        running = max(running, min(1.0, (m - rank) * p))
        out[k] = running
    return out


def compare_seeds(
    variant: dict[int, float], baseline: dict[int, float], bootstrap_p: float | None
) -> SeedComparison | None:
    """The comparison over the seeds that both finished (BLEU by seed); None if none did."""
    seeds = tuple(sorted(set(variant) & set(baseline)))
    if not seeds:
        return None
    diffs = tuple(variant[s] - baseline[s] for s in seeds)
    seed_p = paired_t_p(diffs)
    return SeedComparison(
        seeds=seeds,
        diffs=diffs,
        mean_diff=statistics.fmean(diffs),
        seed_p=seed_p,
        bootstrap_p=bootstrap_p,
        verdict=decide(diffs, seed_p, bootstrap_p),
    )


def seed_warning(seeds: int) -> str | None:
    """The words a report shows when an experiment has too few seeds to trust a verdict."""
    if seeds >= MIN_SEEDS:
        return None
    return (
        f"Only {seeds} seed{'s' if seeds != 1 else ''} per variant: differences between "
        f"training runs are not measured, so no difference here can be told from seed noise. "
        f"Use at least {MIN_SEEDS} seeds."
    )
