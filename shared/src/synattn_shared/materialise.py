"""Dense feature matrices of one shard row, derived on the reader side.

Nothing here is stored: every matrix is an exact function of the O(n) columns. Word level by
default; with ``subword_to_word`` each feature is expanded by its own rule
(docs/papers/index.md, "Subwords, </s> and padding").
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from synattn_shared.defaults import LP_OUTSIDE, RP_CLIP, SLR_BINARIZE, SLR_TAU, SLR_TIES
from synattn_shared.syntax.dependency import HOPS_UNREACHABLE, dea_keep_mask, dep_hops
from synattn_shared.syntax.distance import Binarize, binarized_distances
from synattn_shared.syntax.phrase import (
    RP_OUT,
    LpOutside,
    local_phrase_spans,
    relative_phrasal_positions,
    rp_index,
)
from synattn_shared.syntax.slr import SlrTies, slr_intervals, slr_log_mask
from synattn_shared.syntax.subword import expand_distances, expand_matrix

ALL_FEATURES = (
    "syn_dist",
    "slr_interval",
    "slr_hard",
    "slr_soft",
    "slr_bias",
    "dep_hops",
    "dea_mask",
    "dea_bias",
    "lp_span",
    "rp",
    "rp_index",
)


class MaterialiseOptions(BaseModel):
    """Hyper-parameters of the derived features (defaults: docs/papers/, "Decisions")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tau: float = SLR_TAU
    slr_binarize: Binarize = SLR_BINARIZE
    slr_ties: SlrTies = SLR_TIES
    rp_clip: int = RP_CLIP
    lp_outside: LpOutside = LP_OUTSIDE


def _slr_distances(row: dict[str, Any], opts: MaterialiseOptions) -> np.ndarray:
    d = np.asarray(row["syn_dist"], dtype=np.int16)
    return binarized_distances(d) if opts.slr_binarize == "right" else d


def materialise(
    row: dict[str, Any],
    features: tuple[str, ...] = ALL_FEATURES,
    options: MaterialiseOptions | None = None,
    subword_to_word: list[int] | None = None,
) -> dict[str, np.ndarray | None]:
    """Dense features of one row.

    Args:
        row: a shard row (``ShardDataset[i]`` or ``features.to_row``).
        features: names from ``ALL_FEATURES``.
        options: SLR and RP hyper-parameters.
        subword_to_word: optional ``[T]`` word map (-1 = ``</s>``/BOS/pad) to expand to subwords.

    Returns:
        Name -> array. Dependency features are None without a dependency parse; syntax-free rows
        (``has_syntax`` False) give zero biases and all-True masks (vanilla attention).
    """
    opts = options or MaterialiseOptions()
    unknown = set(features) - set(ALL_FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {', '.join(ALL_FEATURES)}")
    n = len(row["words"])
    syntax = bool(row["has_syntax"])
    heads = row.get("dep_head")
    w = None if subword_to_word is None else np.asarray(subword_to_word, dtype=np.int64)
    T = n if w is None else w.shape[0]
    out: dict[str, np.ndarray | None] = {}
    want = set(features)

    if want & {"syn_dist", "slr_interval", "slr_hard", "slr_soft", "slr_bias"}:
        d = _slr_distances(row, opts)
        d_used = d.astype(np.float32) if w is None else expand_distances(d, w)
        out["syn_dist"] = d_used
        L, R = slr_intervals(d_used, opts.slr_ties)
        out["slr_interval"] = np.stack([L, R])
        if not syntax:
            out.update(
                slr_bias=np.zeros((T, T), np.float32),
                slr_hard=np.ones((T, T), bool),
                slr_soft=np.ones((T, T), np.float32),
            )
        else:
            bias = slr_log_mask(d_used, tau=opts.tau, mode="soft", ties=opts.slr_ties)
            out["slr_bias"] = bias
            out["slr_soft"] = np.exp(bias)
            j = np.arange(L.shape[0])
            out["slr_hard"] = (j[None, :] >= L[:, None]) & (j[None, :] <= R[:, None])

    if want & {"dep_hops", "dea_mask", "dea_bias"}:
        if heads is None:
            out.update(dep_hops=None, dea_mask=None, dea_bias=None)
        else:
            hops: np.ndarray = dep_hops(heads)
            keep: np.ndarray = dea_keep_mask(heads)
            if w is not None:
                hops = expand_matrix(hops, w, HOPS_UNREACHABLE, 0)
                keep = expand_matrix(keep, w, False, True)
            if not syntax:
                keep = np.ones_like(keep)
            out["dep_hops"] = hops
            out["dea_mask"] = keep
            out["dea_bias"] = np.where(keep, np.float32(0), np.float32(-np.inf)).astype(np.float32)

    if want & {"lp_span", "rp", "rp_index"}:
        start, end = local_phrase_spans(row["syn_dist"])
        out["lp_span"] = np.stack([start, end])
        rp: np.ndarray = relative_phrasal_positions(row["const_layer"], start, end)
        if w is not None:
            rp = expand_matrix(rp, w, RP_OUT, 0)
        if not syntax:
            rp = np.zeros_like(rp)
        out["rp"] = rp
        out["rp_index"] = rp_index(rp, opts.rp_clip, opts.lp_outside)

    return {k: out[k] for k in features}
