"""How deep are the constituency trees LPEA and SLR read, and which LPEA clip ``k`` fits them?

The RHE paper (Zhang et al. 2021) tuned LPEA's clip ``k = 6`` to Berkeley-parser trees whose
maximum phrase layer averaged 11.13 on its training set, and states the rule: the best ``k`` is
where the ``2k + 1`` relative phrasal positions cover the average maximum layer (k = 5 and 6
bracket 11.13). synattn's default Multi30k parse is spaCy's dependency parse with constituency
*derived* from it (docs/papers/index.md, "Constituency trees derived from dependencies"), on
sentences half as long: this prints, per split, the parse source (from the manifest), the average /
median / 90th percentile of the per-sentence maximum layer, the share of related off-diagonal pairs
whose ``|RP|`` a clip ``k`` would cut, the ``k`` the RHE paper's rule gives, and the maximum
syntactic distance (SLR's ``tau`` is in distance units).

    make data
    synattn analyze --tree-depth --dev build/m30k/valid --test build/m30k/test2016 --out DIR
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

RHE_PAPER_MAX_LAYER = 11.13  # the RHE paper's average maximum layer


def split_stats(directory: Path) -> dict[str, Any]:
    """Depth statistics of one shard directory."""
    from synattn_shared.shards import ShardDataset
    from synattn_shared.syntax.phrase import local_phrase_spans, related

    ds = ShardDataset(directory)
    max_layer: list[int] = []
    max_dist: list[int] = []
    rp_abs = np.zeros(64, dtype=np.int64)  # histogram of |RP| on related off-diagonal pairs
    for row in ds.iter_rows(columns=["const_layer", "syn_dist", "has_syntax"]):
        if not row["has_syntax"] or not len(row["const_layer"]):
            continue
        layer = np.asarray(row["const_layer"], dtype=np.int64)
        dist = np.asarray(row["syn_dist"], dtype=np.int64)
        max_layer.append(int(layer.max()))
        if len(dist):
            max_dist.append(int(dist.max()))
        start, end = local_phrase_spans(dist)
        rel = related(start, end)
        np.fill_diagonal(rel, False)
        diff = np.abs(layer[None, :] - layer[:, None])[rel]
        rp_abs += np.bincount(np.minimum(diff, 63), minlength=64)
    ml = np.asarray(max_layer)
    pairs = int(rp_abs.sum())
    cut = {str(k): round(float(rp_abs[k + 1 :].sum() / max(pairs, 1)), 4) for k in range(0, 9)}
    return {
        "sentences": len(ml),
        "max_layer_mean": round(float(ml.mean()), 2),
        "max_layer_median": float(np.median(ml)),
        "max_layer_p90": float(np.percentile(ml, 90)),
        "related_pairs": pairs,
        "share_cut_by_k": cut,
        "max_syn_dist_mean": round(float(np.mean(max_dist)), 2),
    }


def rule_k(mean_max_layer: float) -> tuple[int, int]:
    """The RHE paper's rule: the ``k`` values whose ``2k + 1`` bracket the average maximum
    layer."""
    low = max(0, math.floor((mean_max_layer - 1) / 2))
    return low, low + 1


def depth_report(splits: dict[str, Path]) -> tuple[dict[str, Any], list[str]]:
    """Constituency depth of each parsed split (name -> shard folder) beside the RHE paper's,
    with the ``k`` its rule gives and the related pairs each ``k`` would cut: the JSON record
    and a line per split (``synattn analyze --tree-depth``)."""
    report: dict[str, Any] = {}
    lines = []
    for split, folder in splits.items():
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        stats = split_stats(folder)
        stats["parser"] = manifest.get("parser")
        report[split] = stats
        lo, hi = rule_k(stats["max_layer_mean"])
        parse = stats["parser"] or {}
        source = f"{parse.get('model')} ({parse.get('constituency')})"
        cut = stats["share_cut_by_k"]
        lines.append(
            f"{split}: {stats['sentences']} sentences, parse {source}; maximum layer mean "
            f"{stats['max_layer_mean']} (median {stats['max_layer_median']:g}, p90 "
            f"{stats['max_layer_p90']:g}; the RHE paper: {RHE_PAPER_MAX_LAYER}); its rule: "
            f"k = {lo} or {hi}; related pairs cut by k=2/3/4/6: {cut['2']:.2%} / "
            f"{cut['3']:.2%} / {cut['4']:.2%} / {cut['6']:.2%}; maximum syntactic distance "
            f"mean {stats['max_syn_dist_mean']}"
        )
    report["seed_000_max_layer"] = RHE_PAPER_MAX_LAYER  # the key published results/ carry
    first = next(iter(splits))
    report["rule_k"] = list(rule_k(report[first]["max_layer_mean"]))
    return report, lines
