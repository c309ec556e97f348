"""The joint paired bootstrap on Δ: an exhaustive case computed by hand, the BLEU it computes
against sacreBLEU's own, and what pooling seeds would have got wrong."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from synattn_jobs.bootstrap import (
    bleu_delta_bootstrap,
    bleu_from_statistics,
    bleu_statistics,
    delta_bootstrap,
    resample_counts,
)
from synattn_trainer.evaluate import corpus_bleu


def _mean_score(summed: np.ndarray) -> np.ndarray:
    """A metric simple enough to bootstrap by hand: column 0 summed over column 1 (a mean)."""
    summed = np.atleast_2d(summed)
    return summed[:, 0] / summed[:, 1]


def _stats(values: list[int]) -> np.ndarray:
    return np.array([[v, 1] for v in values], dtype=np.int64)


def test_exhaustive_bootstrap_matches_the_hand_computed_distribution() -> None:
    """Two seeds, three sentences, per-sentence differences (3, 1, -1) and (1, 3, -1): averaged
    over seeds (2, 2, -1), so Δ = 1. Every one of the 27 ordered draws of 3 sentences, applied
    to both seeds at once, gives Δ* = (sum of the drawn averages) / 3: 2 in 8 draws (no -1
    drawn), 1 in 12, 0 in 6 and -1 in 1. P*(Δ <= 0) = (7 + 1) / 28 and P*(Δ >= 0) = (26 + 1) /
    28, so p = 2 * 8 / 28 = 4/7; the percentile interval of the 27 sorted values
    (-1, 0 x6, 1 x12, 2 x8) runs from -1 + 0.65 = -0.35 (position 0.025 * 26) to 2."""
    counts = np.array(
        [np.bincount(draw, minlength=3) for draw in itertools.product(range(3), repeat=3)]
    )
    system = [_stats([3, 1, 0]), _stats([1, 3, 0])]
    baseline = [_stats([0, 0, 1]), _stats([0, 0, 1])]
    got = delta_bootstrap(system, baseline, counts, _mean_score)
    assert got.delta == pytest.approx(1.0)
    assert got.p_value == pytest.approx(4 / 7)
    assert got.ci95 == pytest.approx((-0.35, 2.0))
    assert (got.samples, got.seeds) == (27, 2)


def test_identical_outputs_give_no_difference_and_p_one() -> None:
    refs = [f"ein kleiner hund läuft schnell über die wiese {i}" for i in range(40)]
    hyps = [f"ein kleiner hund rennt schnell über eine wiese {i}" for i in range(40)]
    got = bleu_delta_bootstrap([(hyps, hyps)] * 3, refs, samples=200)
    assert got.delta == 0.0 and got.ci95 == (0.0, 0.0) and got.p_value == 1.0


def test_bleu_from_statistics_is_sacrebleus_corpus_bleu() -> None:
    refs = ["a dog runs on the grass", "two men play chess in a park", "a red car", "kids swim"]
    hyps = ["a dog is running on grass", "two men play chess", "the red car", "kids swim ."]
    stats = bleu_statistics(hyps, refs)
    assert bleu_from_statistics(stats.sum(0))[0] == pytest.approx(corpus_bleu(hyps, refs).score)
    draw = [0, 0, 2, 3]  # a resample is the corpus of the drawn sentences
    counts = np.bincount(draw, minlength=4)
    want = corpus_bleu([hyps[i] for i in draw], [refs[i] for i in draw]).score
    assert bleu_from_statistics(counts @ stats)[0] == pytest.approx(want)


def test_copies_of_one_seed_carry_no_more_evidence_than_one() -> None:
    """Pooling three seeds' outputs would resample the same sentences three times as if
    independent and narrow the interval by about sqrt(3); drawing them jointly does not."""
    rng = np.random.default_rng(0)
    sys_values, base_values = rng.integers(0, 10, 60).tolist(), rng.integers(0, 10, 60).tolist()
    counts = resample_counts(60, 500)
    one = delta_bootstrap([_stats(sys_values)], [_stats(base_values)], counts, _mean_score)
    three = delta_bootstrap(
        [_stats(sys_values)] * 3, [_stats(base_values)] * 3, counts, _mean_score
    )
    assert three.ci95 == pytest.approx(one.ci95) and three.p_value == pytest.approx(one.p_value)
    pooled_counts = resample_counts(180, 500)
    pooled = delta_bootstrap(
        [_stats(sys_values * 3)], [_stats(base_values * 3)], pooled_counts, _mean_score
    )
    width = lambda b: b.ci95[1] - b.ci95[0]  # noqa: E731
    assert width(pooled) < 0.75 * width(one)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="same seeds"):
        delta_bootstrap([], [], resample_counts(3, 5), _mean_score)
    with pytest.raises(ValueError, match="same test sentences"):
        delta_bootstrap([_stats([1, 2])], [_stats([1, 2, 3])], resample_counts(3, 5))
    with pytest.raises(ValueError, match="references"):
        bleu_statistics(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="at least one"):
        resample_counts(0)
