"""Scoring with sacreBLEU: BLEU and chrF with signatures, paired bootstrap against another
system (Koehn 2004, through sacreBLEU), and BLEU by reference-length bins
(docs/papers/index.md, "Evaluation and BLEU")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sacrebleu.metrics.bleu import BLEU
from sacrebleu.metrics.chrf import CHRF

PAPER_BINS = (0, 10, 20, 30, 40, 50)  # [0,10) ... [50, inf): the papers' bins
MULTI30K_BINS = (0, 8, 12, 16, 20)  # the spec's extra bins for Multi30k's short references
UNRELIABLE = 50  # bins with fewer sentences are flagged


@dataclass(frozen=True)
class Score:
    """A corpus score and the sacreBLEU signature that makes it reproducible."""

    name: str
    score: float
    signature: str
    detail: str


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> Score:
    """Detokenised corpus BLEU (13a tokenisation, cased unless ``lowercase``)."""
    _check(hyps, refs)
    metric = BLEU(lowercase=lowercase)
    res = metric.corpus_score(list(hyps), [list(refs)])
    return Score("BLEU", res.score, str(metric.get_signature()), str(res))


def corpus_chrf(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Corpus chrF2."""
    _check(hyps, refs)
    metric = CHRF()
    res = metric.corpus_score(list(hyps), [list(refs)])
    return Score("chrF", res.score, str(metric.get_signature()), str(res))


@dataclass(frozen=True)
class PairedResult:
    """System vs baseline under paired bootstrap resampling."""

    baseline: float
    system: float
    p_value: float
    ci95: tuple[float, float]  # the system's 95% confidence interval
    samples: int


def paired_bootstrap(
    system: Sequence[str],
    baseline: Sequence[str],
    refs: Sequence[str],
    samples: int = 1000,
    seed: int = 12345,
) -> PairedResult:
    """sacreBLEU's paired bootstrap test (``--paired-bs``) of BLEU, system against baseline."""
    import os

    from sacrebleu.significance import PairedTest

    _check(system, refs)
    _check(baseline, refs)
    os.environ.setdefault("SACREBLEU_SEED", str(seed))
    metric = BLEU(references=[list(refs)])
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(system))],
        {"BLEU": metric},
        references=None,
        test_type="bs",
        n_samples=samples,
    )
    _, results = test()
    base, sys_ = (cast(Any, r) for r in results["BLEU"])  # sacreBLEU types them str | Result
    return PairedResult(
        baseline=base.score,
        system=sys_.score,
        p_value=float(sys_.p_value),
        ci95=(sys_.mean - sys_.ci, sys_.mean + sys_.ci),
        samples=samples,
    )


def length_bin(length: int, edges: Sequence[int] = PAPER_BINS) -> int:
    """Index of the bin ``[edges[k], edges[k+1])`` holding ``length`` (the last bin is open)."""
    k = 0
    while k + 1 < len(edges) and length >= edges[k + 1]:
        k += 1
    return k


def bleu_by_length(
    hyps: Sequence[str], refs: Sequence[str], edges: Sequence[int] = PAPER_BINS
) -> list[tuple[str, int, float, bool]]:
    """BLEU per reference-length bin (whitespace tokens of the raw reference):
    ``(bin, sentences, BLEU, reliable)``; empty bins are left out."""
    _check(hyps, refs)
    bins = [length_bin(len(r.split()), edges) for r in refs]
    out = []
    for k, lo in enumerate(edges):
        idx = [i for i, b in enumerate(bins) if b == k]
        if not idx:
            continue
        label = f"[{lo},{edges[k + 1]})" if k + 1 < len(edges) else f"[{lo},inf)"
        score = corpus_bleu([hyps[i] for i in idx], [refs[i] for i in idx]).score
        out.append((label, len(idx), score, len(idx) >= UNRELIABLE))
    return out


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
