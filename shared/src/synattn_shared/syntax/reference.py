"""Numpy reference formulas of the attention-side quantities: RHE's measures, LPEA's bias
table (docs/papers/rhe-sea.md), Localness and PASCAL (docs/papers/index.md, "Baselines").

The trainer implements these in torch; its tests compare against these references, which are
themselves pinned to hand-checked worked examples.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def head_confidence(
    attn: npt.ArrayLike, query_mask: npt.ArrayLike, key_mask: npt.ArrayLike
) -> float:
    """``h_conf = mean_{i in Q} max_{j in K} A_ij`` (RHE paper eq. 3; Voita et al. 2019)."""
    a = np.asarray(attn, dtype=np.float64)
    q = np.asarray(query_mask, dtype=bool)
    k = np.asarray(key_mask, dtype=bool)
    return float(np.where(k[None, :], a, -np.inf)[q].max(axis=1).mean())


def syntactic_attention(
    attn: npt.ArrayLike,
    related: npt.ArrayLike,
    query_mask: npt.ArrayLike,
    key_mask: npt.ArrayLike,
) -> float:
    """``Syn_attn = mean_{i in Q} sum_{j in K} 1[related] A_ij`` (RHE paper eq. 9)."""
    a = np.asarray(attn, dtype=np.float64)
    keep = np.asarray(related, dtype=bool) & np.asarray(key_mask, dtype=bool)[None, :]
    return float((a * keep)[np.asarray(query_mask, dtype=bool)].sum(axis=1).mean())


def head_label(h_conf: float, syn_attn: float) -> int:
    """RHE label (eq. 10): 1 (important) iff ``Syn_attn > sigmoid(h_conf)``, else 0 (redundant)."""
    return int(syn_attn > 1.0 / (1.0 + np.exp(-h_conf)))


def phrasal_bias_table(
    emb: npt.ArrayLike, w_p: npt.ArrayLike, b_p: npt.ArrayLike, u_p: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """LPEA table ``beta_r = -|tanh(W_P w_r + b_P) . U_P|`` for each embedding row (eq. 8)."""
    e = np.asarray(emb, dtype=np.float64)
    table: npt.NDArray[np.float64] = -np.abs(
        np.tanh(e @ np.asarray(w_p).T + np.asarray(b_p)) @ np.asarray(u_p)
    )
    return table


def localness_bias(centre: float, window: float, length: int) -> npt.NDArray[np.float64]:
    """Yang et al. Gaussian bias ``G_j = -(j - P)^2 / (2 sigma^2)``, ``sigma = D/2``."""
    j = np.arange(length, dtype=np.float64)
    sigma = window / 2.0
    bias: npt.NDArray[np.float64] = -((j - centre) ** 2) / (2.0 * sigma**2)
    return bias


def pascal_density(centres: npt.ArrayLike, length: int, sigma: float = 1.0) -> np.ndarray:
    """PASCAL normal density ``N_sj`` around each row's centre."""
    c = np.asarray(centres, dtype=np.float64)[:, None]
    j = np.arange(length, dtype=np.float64)[None, :]
    density: np.ndarray = np.exp(-((j - c) ** 2) / (2 * sigma**2)) / np.sqrt(2 * np.pi * sigma**2)
    return density
