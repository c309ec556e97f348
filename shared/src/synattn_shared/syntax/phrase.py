"""Local phrases and relative local-phrasal positions RP (RHE paper §4.1.2;
docs/papers/rhe-sea.md, "LPEA").

``LP(i)`` is the span of the collapsed-tree parent of word ``i`` (Rule 1); ``R`` its symmetric
closure (Rule 2); ``RP_ij = layer_j - layer_i`` on related pairs and ``RP_OUT`` elsewhere.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

RP_OUT = 32767  # the paper's "infinity"; clip() maps it to +k without a special case
LpOutside = Literal["clip", "extra_index", "mask"]


def local_phrase_spans(
    d: npt.ArrayLike,
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]:
    """Local-phrase spans ``[lp_start, lp_end)`` from flat distances.

    With ``h = min(d_{i-1}, d_i)`` (a missing neighbour counts as +inf), ``LP(i)`` is the maximal
    span around ``i`` whose inner splits are all ``<= h``.

    Args:
        d: flat split distances ``[n-1]``.

    Returns:
        ``lp_start, lp_end`` as ``int16[n]``.
    """
    dist = np.asarray(d, dtype=np.float64)
    n = dist.shape[0] + 1
    if n == 1:
        return np.zeros(1, np.int16), np.ones(1, np.int16)
    padded = np.concatenate([[np.inf], dist, [np.inf]])
    h = np.minimum(padded[:-1], padded[1:])  # [n]
    i = np.arange(n)[:, None]
    t = np.arange(n - 1)[None, :]
    above = dist[None, :] > h[:, None]  # splits that end the phrase
    left = above & (t < i)
    right = above & (t >= i)
    start = np.where(left.any(axis=1), (n - 2) - np.argmax(left[:, ::-1], axis=1) + 1, 0)
    end = np.where(right.any(axis=1), np.argmax(right, axis=1), n - 1) + 1
    return start.astype(np.int16), end.astype(np.int16)


def related(lp_start: npt.ArrayLike, lp_end: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Rule 2: ``R(i, j) = j in LP(i) or i in LP(j)``; symmetric and reflexive."""
    s = np.asarray(lp_start)
    e = np.asarray(lp_end)
    j = np.arange(s.shape[0])
    inside = (j[None, :] >= s[:, None]) & (j[None, :] < e[:, None])
    return inside | inside.T


def relative_phrasal_positions(
    layers: npt.ArrayLike, lp_start: npt.ArrayLike, lp_end: npt.ArrayLike
) -> npt.NDArray[np.int16]:
    """RP matrix: key layer minus query layer on related pairs, ``RP_OUT`` elsewhere."""
    lay = np.asarray(layers, dtype=np.int32)
    diff = lay[None, :] - lay[:, None]
    return np.where(related(lp_start, lp_end), diff, RP_OUT).astype(np.int16)


def rp_index(rp: npt.ArrayLike, k: int, lp_outside: LpOutside = "clip") -> npt.NDArray[np.int8]:
    """Embedding index ``clip(RP, k) + k`` (eq. 7).

    Args:
        rp: RP values with ``RP_OUT`` for unrelated pairs.
        k: clip distance (the RHE paper's best: 6).
        lp_outside: ``clip`` gives OUT the ``+k`` index (default); ``extra_index`` and ``mask``
            give it the extra index ``2k+1`` (a separate embedding, or ``-inf`` in the variant).

    Returns:
        ``int8`` indices in ``0 .. 2k`` (``0 .. 2k+1`` with an OUT index).
    """
    if not 0 <= k <= 62:
        raise ValueError(f"clip k must be in [0, 62] to fit int8 indices, got {k}")
    r = np.asarray(rp, dtype=np.int32)
    idx = np.clip(r, -k, k) + k
    if lp_outside != "clip":
        idx = np.where(r == RP_OUT, 2 * k + 1, idx)
    return idx.astype(np.int8)
