"""Is a variant better than its baseline once training noise is counted? Two tests must agree,
and every comparison says how large a difference it could have seen.

A single training run cannot separate a method from its seed: the same configuration moves by
a BLEU point or more between seeds on small data. So a comparison is made over seeds, with the
baseline trained on the same seeds, and two tests are asked:

- a two-sided paired t-test over the per-seed BLEU differences (training noise), and
- a paired bootstrap on the mean difference, the test sentences resampled jointly across seeds
  (test-set sampling noise; ``synattn_jobs.bootstrap``).

A variant is called ``better`` (``worse``) only when both give p < ``ALPHA`` and every seed's
difference has the same sign; anything else is ``inconclusive``. A table compares several
variants at once, so its verdicts use Holm-adjusted p-values over the table's rows (``holm``,
each test's p-values adjusted as one family): five rows at 0.05 each would otherwise call some
no-op "significant" about one table in four. With fewer than
``MIN_SEEDS`` seeds the verdict stands but the report warns in words that it is weak.

A verdict alone reads badly when it is *inconclusive*: with three seeds the seed test needs
t > 4.30 for p < 0.05, so an inconclusive row is often one that could not have been anything
else. Each comparison therefore carries the seed-paired 95% confidence interval of the mean
difference (``mean_ci``: every true effect inside it is consistent with the data, zero
included or not) and the minimum detectable effect (``min_detectable_effect``: the smallest
true difference this design, at its seed count, observed seed spread and Holm-adjusted level,
would call significant four times in five). An inconclusive row whose interval holds both 0
and a paper's gain says "consistent with both", not "no effect".

The sign rule: a variant whose seeds moved both ways, or one seed not at all, is never called,
whatever the p-values say.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

ALPHA = 0.05
MIN_SEEDS = 3
LEVEL = 0.95  # of the confidence intervals
POWER = 0.8  # of the minimum detectable effect


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
    ci95: tuple[float, float] | None = None  # seed-paired t-interval of the mean difference


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


def mean_ci(diffs: Sequence[float], level: float = LEVEL) -> tuple[float, float] | None:
    """The seed-paired t confidence interval of the mean difference (``n - 1`` degrees of
    freedom): None for fewer than 2 seeds; a point when the differences are all equal, since
    they show no spread to widen it (read it with the seed count)."""
    if len(diffs) < 2:
        return None
    if any(not math.isfinite(d) for d in diffs):
        raise ValueError("BLEU differences must be finite")
    from scipy.stats import t

    mean = statistics.fmean(diffs)
    half = float(t.ppf(0.5 + level / 2, len(diffs) - 1)) * statistics.stdev(diffs)
    half /= math.sqrt(len(diffs))
    return (mean - half, mean + half)


def min_detectable_effect(
    spread: float | None, seeds: int, alpha: float = ALPHA, power: float = POWER
) -> float | None:
    """The smallest true mean difference that a two-sided paired t-test over ``seeds`` seeds at
    level ``alpha`` detects with probability ``power``, when per-seed differences spread with
    standard deviation ``spread`` (the noncentral t; ``seeds - 1`` degrees of freedom). None
    without a usable spread (fewer than 2 seeds, or differences that did not vary).

    ``alpha`` is the level a single row must meet: after Holm over a family of m rows a lone
    real effect must reach ``alpha / m``, and callers pass that. The verdict also needs the
    bootstrap and the signs to agree, so this is a lower bound on what a verdict can see."""
    if seeds < 2 or spread is None or not math.isfinite(spread) or spread <= 0:
        return None
    from scipy.optimize import brentq
    from scipy.stats import nct, t

    df = seeds - 1
    crit = float(t.ppf(1 - alpha / 2, df))

    def shortfall(nc: float) -> float:
        lower = float(nct.cdf(-crit, df, nc))  # the wrong-sign tail; scipy's NaN there is ~0
        return float(nct.sf(crit, df, nc)) + (lower if math.isfinite(lower) else 0.0) - power

    high = 1.0
    while shortfall(high) < 0:
        high *= 2
    nc = float(brentq(shortfall, 0.0, high, xtol=1e-9))
    return nc * spread / math.sqrt(seeds)


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
        ci95=mean_ci(diffs),
    )


def reading(ci: tuple[float, float] | None, gains: Sequence[float] = ()) -> str:
    """What a confidence interval allows one to say, in words: whether it excludes no effect,
    and whether it holds each of a paper's reported gains."""
    if ci is None:
        return "one seed: no interval"
    low, high = ci
    if low > 0:
        zero = "above zero"
    elif high < 0:
        zero = "below zero"
    else:
        zero = "consistent with no effect"
    if not gains:
        return zero
    held = [g for g in gains if low <= g <= high]
    missed = [g for g in gains if not low <= g <= high]
    parts = [zero]
    if held:
        parts.append("with the paper's " + " and ".join(f"{g:+.2f}" for g in held))
    if missed:
        if all(high < g for g in missed):
            side = "below"
        elif all(low > g for g in missed):
            side = "above"
        else:
            side = "outside"
        parts.append(f"{side} the paper's " + " and ".join(f"{g:+.2f}" for g in missed))
    return "; ".join(parts)


def detectable(mde: float | None, seeds: int, family: int) -> str:
    """The minimum detectable effect in words a reader can use."""
    if mde is None:
        return "not estimable (fewer than 2 seeds, or no spread between them)"
    rows = f", {family} rows tested together" if family > 1 else ""
    return (
        f"with {seeds} seeds{rows}, a true difference is found 4 times in 5 only from "
        f"{mde:.2f} BLEU up"
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
