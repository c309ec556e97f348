"""Syntactic distance of a constituency tree and its inverse (Shen et al. 2018;
docs/papers/gated-slr.md, "Syntactic distance").

``d_t`` is the height, in the collapsed tree C(T) with leaves at height 0, of the lowest common
ancestor of words ``t`` and ``t+1``; this is the gated-SLR paper's "-1 offset" form (minimum 1).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from synattn_shared.syntax.trees import Shape, binarize_right, canonical_shape

Binarize = Literal["none", "right"]
Ties = Literal["merge", "first"]


def shape_distances(shape: Shape, binarize: Binarize = "none") -> npt.NDArray[np.int16]:
    """Distances of a tree shape: post-order, every split under a node gets its height.

    Args:
        shape: an unlabelled tree (unary nodes are collapsed first).
        binarize: ``right`` right-factors n-ary nodes first (Shen et al.'s and Hou et al.'s code).

    Returns:
        ``int16[n-1]`` in offset form, values in ``[1, ht(root)]``.
    """
    node = canonical_shape(shape)
    if binarize == "right":
        node = binarize_right(node)
    out: list[int] = []

    def walk(v: Shape) -> int:
        if isinstance(v, int):
            return 0
        # Children first, then the node's own height fills the gaps between them.
        parts: list[list[int]] = []
        heights: list[int] = []
        for child in v:
            start = len(out)
            heights.append(walk(child))
            parts.append(out[start:])
            del out[start:]
        h = 1 + max(heights)
        for j, part in enumerate(parts):
            if j:
                out.append(h)
            out.extend(part)
        return h

    walk(node)
    return np.asarray(out, dtype=np.int16)


def distances_to_shape(d: npt.ArrayLike, ties: Ties = "merge") -> Shape:
    """Inverse of ``shape_distances``: a Cartesian tree by maximum.

    Args:
        d: split values ``[n-1]`` (any integers or floats).
        ties: ``merge`` makes all arg-max splits of a range siblings (exact inverse of the flat
            distances); ``first`` splits at the first arg-max only (Shen et al.; binarised trees).

    Returns:
        The unlabelled tree over words ``0 .. n-1``.
    """
    dist = np.asarray(d)
    n = len(dist) + 1

    def build(a: int, b: int) -> Shape:
        if a == b:
            return a
        seg = dist[a:b]
        top = seg.max()
        cuts = (np.flatnonzero(seg == top) + a).tolist()
        if ties == "first":
            cuts = cuts[:1]
        kids: list[Shape] = []
        start = a
        for t in cuts:
            kids.append(build(start, t))
            start = t + 1
        kids.append(build(start, b))
        return kids

    return build(0, n - 1)


def binarized_distances(d: npt.ArrayLike) -> npt.NDArray[np.int16]:
    """Right-binarised distances from flat ones: rebuild C(T), binarise, recompute."""
    dist = np.asarray(d)
    if dist.shape[0] == 0:
        return np.zeros(0, np.int16)
    return shape_distances(distances_to_shape(dist, "merge"), binarize="right")
