"""Constituency trees derived from a dependency parse: the ``derived`` backend (METHODS §5).

Used when no constituency model is installed. Non-projective arcs are lifted to the grandparent
(shortest arc first), then each head projects one constituent (``flat``, default), an X-bar-like
pair (``two_level``) or a chain of binary nodes (``binary``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import nltk
import numpy as np
import numpy.typing as npt

from synattn_shared.syntax.dependency import ancestor_matrix, validate_heads

Scheme = Literal["flat", "two_level", "binary"]

PHRASE_OF_UPOS = {
    "NOUN": "NP",
    "PROPN": "NP",
    "PRON": "NP",
    "NUM": "NP",
    "VERB": "VP",
    "AUX": "VP",
    "ADP": "PP",
    "ADJ": "ADJP",
    "ADV": "ADVP",
}


def nonprojective_arcs(parent: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Dependents whose arc is non-projective: a word strictly between head and dependent is not
    dominated by the head (§5.1 step 2). Parents are 0-based, -1 = root."""
    n = parent.shape[0]
    anc = ancestor_matrix(parent)
    k = np.arange(n)[None, :]
    d = np.arange(n)[:, None]
    h = parent[:, None]
    between = (k > np.minimum(d, h)) & (k < np.maximum(d, h)) & (h >= 0)
    dominated = anc[:, np.maximum(parent, 0)].T  # [d, k]: k is below h(d)
    return np.flatnonzero((between & ~dominated).any(axis=1))


def projectivise(heads: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Lift non-projective arcs until none is left (§5.1 step 2).

    Args:
        heads: 1-based heads, 0 = root.

    Returns:
        0-based parents (-1 = root) of a projective tree; unchanged when already projective.
    """
    parent = validate_heads(heads).copy()
    while True:
        bad = nonprojective_arcs(parent)
        if bad.size == 0:
            return parent
        length = np.abs(parent[bad] - bad)
        d = int(bad[np.lexsort((bad, length))[0]])  # shortest arc, then smallest dependent
        parent[d] = parent[parent[d]] if parent[d] >= 0 else -1


def _phrase_label(i: int, upos: Sequence[str] | None, is_root: bool) -> str:
    if is_root:
        return "S"
    return PHRASE_OF_UPOS.get(upos[i], "XP") if upos is not None else "XP"


def derive_tree(
    words: Sequence[str],
    heads: npt.ArrayLike,
    upos: Sequence[str] | None = None,
    xpos: Sequence[str] | None = None,
    scheme: Scheme = "flat",
) -> nltk.Tree:
    """Constituency tree over ``words`` from a dependency parse (§5.1).

    Args:
        words: the tokens.
        heads: 1-based heads, 0 = root (several roots give a virtual ``ROOT`` node).
        upos: UPOS tags, for phrase labels (``XP`` when missing).
        xpos: fine tags for the preterminals (falls back to UPOS, then ``X``).
        scheme: ``flat`` (default), ``two_level`` or ``binary``.

    Returns:
        A labelled tree whose leaves are ``words`` in order, every word under a preterminal.
    """
    parent = projectivise(heads)
    n = parent.shape[0]
    deps: list[list[int]] = [[] for _ in range(n)]
    for d in range(n):
        if parent[d] >= 0:
            deps[int(parent[d])].append(d)
    roots = [i for i in range(n) if parent[i] < 0]
    tags = xpos if xpos is not None else upos

    def leaf(i: int) -> nltk.Tree:
        return nltk.Tree(tags[i] if tags is not None else "X", [words[i]])

    def proj(h: int, is_root: bool) -> nltk.Tree:
        if not deps[h]:
            return leaf(h)
        label = _phrase_label(h, upos, is_root)
        left = [proj(c, False) for c in deps[h] if c < h]
        right = [proj(c, False) for c in deps[h] if c > h]
        if scheme == "flat":
            return nltk.Tree(label, [*left, leaf(h), *right])
        if scheme == "two_level":
            inner_label = _phrase_label(h, upos, False)
            core: list[nltk.Tree] = [leaf(h), *right]
            inner = nltk.Tree(inner_label if left else label, core) if right else core[0]
            return nltk.Tree(label, [*left, inner]) if left else inner
        # binary: right dependents nearest first, then left dependents nearest first
        node = leaf(h)
        inner_label = _phrase_label(h, upos, False)
        for sub in right:
            node = nltk.Tree(inner_label, [node, sub])
        for sub in reversed(left):
            node = nltk.Tree(inner_label, [sub, node])
        node.set_label(label)
        return node

    tops = [proj(r, True) for r in roots]
    return tops[0] if len(tops) == 1 else nltk.Tree("ROOT", tops)


def flat_features(
    heads: npt.ArrayLike,
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]:
    """Flat-scheme distances and layers straight from the heads, without building a tree.

    In the flat derived tree a word with dependents is a node whose height is the height of its
    dependency subtree, so ``d_t`` is the subtree height of the dependency LCA of ``t`` and
    ``t+1`` (a virtual root above several roots sits one above the highest root). A word's layer
    is its head word's depth + 2 (node, then preterminal), or its own depth + 2 if it has
    dependents. Equals ``syntactic_distances``/``leaf_depths`` of ``derive_tree(..., "flat")``.

    Returns:
        ``syn_dist: int16[n-1]`` and ``const_layer: int16[n]``.
    """
    parent = projectivise(heads)
    n = parent.shape[0]
    anc = ancestor_matrix(parent)
    depth = anc.sum(axis=1) - 1
    has_deps = np.zeros(n, dtype=bool)
    has_deps[parent[parent >= 0]] = True
    # Subtree heights: the longest downward path = max over descendants of their depth gap.
    gap = np.where(anc, depth[:, None] - depth[None, :], -1)  # [desc, anc]
    height = gap.max(axis=0)
    multi_root = int((parent < 0).sum()) > 1
    lift = 1 if multi_root else 0
    host = np.where(has_deps, np.arange(n), np.maximum(parent, 0))
    host_depth = np.where(has_deps | (parent >= 0), depth[host], -1)  # a lone root: no node
    layers = host_depth + lift + 2
    if n == 1:
        return np.zeros(0, np.int16), np.ones(1, np.int16)
    # LCA of t and t+1: the deepest common ancestor.
    common = anc[:-1] & anc[1:]  # [n-1, n]
    has_common = common.any(axis=1)
    lca = np.argmax(np.where(common, depth[None, :], -1), axis=1)
    root_height = height[parent < 0].max() + 1
    dist = np.where(has_common, height[lca], root_height)
    if multi_root:
        # A lone root word has no node; its preterminal hangs straight under the virtual root.
        lone = (parent < 0) & ~has_deps
        layers = np.where(lone, 2, layers)
    return dist.astype(np.int16), layers.astype(np.int16)
