"""A paired bootstrap on the BLEU difference between two systems trained on the same seeds.

The question a comparison asks is whether the mean Δ BLEU over seeds (system minus baseline,
seed by seed) would survive another draw of test sentences. So each bootstrap sample draws
*one* set of test sentences, with replacement, and applies it to every seed's outputs of both
systems; Δ is recomputed on it as the mean over seeds of corpus BLEU differences. The
percentile interval of those Δs is the test-set half of the uncertainty (the seed-paired
t-interval in ``synattn_jobs.verdict`` is the training half), and the two-sided p-value is the
level at which that interval would just reach 0: ``2 min(P*(Δ <= 0), P*(Δ >= 0))``, with the
usual +1 in numerator and denominator so that a finite number of samples never claims p = 0.

Why not sacreBLEU's paired bootstrap on the seeds' outputs pooled? It resamples the same test
sentences once per seed as if they were independent, which shrinks the spread as if the test
set were three times larger; and it tests ``|Δ*|`` around the observed Δ, so two identical
outputs get a small p. Here identical outputs give Δ = 0 in every sample and p = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

SAMPLES = 1000
SEED = 12345  # fixed, so that a report recomputes to the digit
TIE = 1e-9  # |Δ| below this (BLEU points) is a tie: sums of per-seed scores round unevenly

Stats = NDArray[np.int64]  # per-sentence sufficient statistics: (sentences, k)
Scorer = Callable[[NDArray[np.int64]], NDArray[np.float64]]  # summed stats (rows, k) -> score


@dataclass(frozen=True)
class DeltaBootstrap:
    """The bootstrap of the mean Δ over seeds: the observed Δ, its percentile interval, the
    two-sided p-value of Δ = 0, and how many samples and seeds it drew on."""

    delta: float
    ci95: tuple[float, float]
    p_value: float
    samples: int
    seeds: int


def bleu_statistics(hyps: Sequence[str], refs: Sequence[str]) -> Stats:
    """sacreBLEU's per-sentence BLEU statistics (n-gram matches and totals, lengths), the
    numbers a corpus BLEU is computed from once summed."""
    from sacrebleu.metrics.bleu import BLEU

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    rows = BLEU()._extract_corpus_statistics(list(hyps), [list(refs)])
    return np.asarray(rows, dtype=np.int64).reshape(len(hyps), -1)


def bleu_from_statistics(summed: NDArray[np.int64]) -> NDArray[np.float64]:
    """Corpus BLEU of each row of summed statistics: what ``corpus_bleu`` gives on the
    sentences they were summed over (same tokenisation, casing and smoothing)."""
    from sacrebleu.metrics.bleu import BLEU

    metric = BLEU()
    return np.array([metric._compute_score_from_stats(list(map(int, row))).score
                     for row in np.atleast_2d(summed)])  # fmt: skip


def resample_counts(sentences: int, samples: int = SAMPLES, seed: int = SEED) -> NDArray[np.int64]:
    """How many times each test sentence is drawn in each bootstrap sample: (samples,
    sentences), every row summing to ``sentences``."""
    if sentences < 1 or samples < 1:
        raise ValueError("the bootstrap needs at least one sentence and one sample")
    rng = np.random.default_rng(seed)
    return rng.multinomial(sentences, np.full(sentences, 1.0 / sentences), size=samples)


def delta_bootstrap(
    system: Sequence[Stats],
    baseline: Sequence[Stats],
    counts: NDArray[np.int64],
    score: Scorer = bleu_from_statistics,
) -> DeltaBootstrap:
    """The joint bootstrap of the mean Δ over seeds: ``system[k]`` and ``baseline[k]`` are the
    per-sentence statistics of seed k's outputs on the same test sentences, and every row of
    ``counts`` (one bootstrap sample: how often each sentence is drawn) applies to all of them.
    """
    if not system or len(system) != len(baseline):
        raise ValueError("need the same seeds, at least one, on both sides")
    sentences = counts.shape[1]
    if any(s.shape[0] != sentences for s in (*system, *baseline)):
        raise ValueError("every seed's outputs must cover the same test sentences")
    observed = np.ones((1, sentences), dtype=np.int64)
    delta = 0.0
    resampled = np.zeros(counts.shape[0])
    for sys_stats, base_stats in zip(system, baseline, strict=True):
        delta += float(score(observed @ sys_stats)[0] - score(observed @ base_stats)[0])
        resampled += score(counts @ sys_stats) - score(counts @ base_stats)
    seeds = len(system)
    delta /= seeds
    resampled /= seeds
    resampled[np.abs(resampled) < TIE] = (
        0.0  # a difference that cancels is a tie, not its rounding
    )
    n = len(resampled)
    below = (int(np.sum(resampled <= 0.0)) + 1) / (n + 1)
    above = (int(np.sum(resampled >= 0.0)) + 1) / (n + 1)
    low, high = np.percentile(resampled, [2.5, 97.5])
    return DeltaBootstrap(
        delta=delta,
        ci95=(float(low), float(high)),
        p_value=min(1.0, 2.0 * min(below, above)),
        samples=n,
        seeds=seeds,
    )


def bleu_delta_bootstrap(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    refs: Sequence[str],
    samples: int = SAMPLES,
    seed: int = SEED,
) -> DeltaBootstrap:
    """``delta_bootstrap`` on translations: one (system, baseline) output pair per seed, all of
    the same test sentences ``refs``."""
    counts = resample_counts(len(refs), samples, seed)
    system = [bleu_statistics(s, refs) for s, _ in pairs]
    baseline = [bleu_statistics(b, refs) for _, b in pairs]
    return delta_bootstrap(system, baseline, counts)
