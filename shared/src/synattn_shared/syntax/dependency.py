"""Dependency trees: validation, tree hops and the DEA mask (RHE paper eq. 5;
docs/papers/rhe-sea.md, "DEA").

Heads are 1-based with 0 = root, as on disk. ``dep_hops[i, j]`` is the path length between words
``i`` and ``j`` in the undirected dependency graph, ``HOPS_UNREACHABLE`` (255) across trees.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

HOPS_UNREACHABLE = 255
HOPS_MAX = 254


def validate_heads(heads: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Check 1-based heads (range ``[0, n]``, no self-loops, no cycles); return 0-based parents.

    Returns:
        ``int64[n]`` parents, -1 for roots.

    Raises:
        ValueError: naming the first offending token (1-based) on a range error or a cycle.
    """
    h = np.asarray(heads, dtype=np.int64)
    n = h.shape[0]
    if n == 0:
        raise ValueError("empty sentence (no tokens)")
    bad = np.flatnonzero((h < 0) | (h > n))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"head {int(h[k])} of token {k + 1} is outside [0, {n}]")
    parent = h - 1
    selfloop = np.flatnonzero(parent == np.arange(n))
    if selfloop.size:
        raise ValueError(f"token {int(selfloop[0]) + 1} is its own head")
    # Pointer doubling: after ceil(log2 n) rounds every word has reached a root unless it is on
    # (or hangs below) a cycle.
    up = np.where(parent < 0, np.arange(n), parent)
    for _ in range(max(1, int(np.ceil(np.log2(n + 1))) + 1)):
        up = up[up]
    stuck = np.flatnonzero(parent[up] >= 0)
    if stuck.size:
        raise ValueError(f"dependency cycle through token {int(up[stuck[0]]) + 1}")
    return parent


def ancestor_matrix(parent: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """``anc[i, a]`` is True when ``a`` is ``i`` or an ancestor of ``i`` (0-based parents)."""
    n = parent.shape[0]
    anc = np.eye(n, dtype=bool)
    cur = np.arange(n)
    alive = parent[cur] >= 0
    while alive.any():
        cur = np.where(alive, parent[np.maximum(cur, 0)], cur)
        rows = np.flatnonzero(alive)
        anc[rows, cur[rows]] = True
        alive = alive & (parent[cur] >= 0)
    return anc


def dep_hops(heads: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Tree distance between every pair of words.

    ``hops(i, j) = depth_i + depth_j - 2 depth(LCA)``; the number of common ancestors (inclusive)
    is ``depth(LCA) + 1``, so one boolean matrix product gives every LCA depth at once.

    Args:
        heads: 1-based heads ``[n]``, 0 = root.

    Returns:
        ``uint8[n, n]``, symmetric, 0 on the diagonal, 255 between different trees, else clamped
        to 254.
    """
    parent = validate_heads(heads)
    anc = ancestor_matrix(parent).astype(np.float32)
    depth = anc.sum(axis=1) - 1.0
    common = anc @ anc.T  # exact for counts < 2**24
    hops = depth[:, None] + depth[None, :] - 2.0 * (common - 1.0)
    hops = np.where(common > 0, np.minimum(hops, HOPS_MAX), HOPS_UNREACHABLE)
    return hops.astype(np.uint8)


def dea_keep_mask(heads: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """DEA keep-mask: True where ``i = j``, ``h(i) = j`` or ``h(j) = i``.

    Built directly from the arcs in O(n) writes; equals ``dep_hops(heads) <= 1``.
    """
    parent = validate_heads(heads)
    n = parent.shape[0]
    keep = np.eye(n, dtype=bool)
    child = np.flatnonzero(parent >= 0)
    keep[child, parent[child]] = True
    keep[parent[child], child] = True
    return keep


def dea_bias(heads: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """DEA additive bias ``D`` (RHE paper eq. 5): 0 where related, ``-inf`` elsewhere."""
    return np.where(dea_keep_mask(heads), np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
