"""Constituency trees derived from a dependency parse: the ``derived`` backend
(docs/papers/index.md, "Constituency trees derived from dependencies").

Used when no constituency model is installed. Non-projective arcs are lifted to the grandparent
(shortest arc first), then each head projects one constituent (``flat``, default), an X-bar-like
pair (``two_level``) or a chain of binary nodes (``binary``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from synattn_shared.syntax.dependency import ancestor_matrix, validate_heads

if TYPE_CHECKING:  # nltk loads scipy.stats (1-2 s): imported where a tree is built
    import nltk

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
    dominated by the head. Parents are 0-based, -1 = root."""
    n = parent.shape[0]
    anc = ancestor_matrix(parent)
    k = np.arange(n)[None, :]
    d = np.arange(n)[:, None]
    h = parent[:, None]
    between = (k > np.minimum(d, h)) & (k < np.maximum(d, h)) & (h >= 0)
    dominated = anc[:, np.maximum(parent, 0)].T  # [d, k]: k is below h(d)
    return np.flatnonzero((between & ~dominated).any(axis=1))


def projectivise(heads: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Lift non-projective arcs until none is left, shortest arc first.

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
    """Constituency tree over ``words`` from a dependency parse.

    Args:
        words: the tokens.
        heads: 1-based heads, 0 = root (several roots give a virtual ``ROOT`` node).
        upos: UPOS tags, for phrase labels (``XP`` when missing).
        xpos: fine tags for the preterminals (falls back to UPOS, then ``X``).
        scheme: ``flat`` (default), ``two_level`` or ``binary``.

    Returns:
        A labelled tree whose leaves are ``words`` in order, every word under a preterminal.
    """
    import nltk

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


def flat_features_batch(
    heads_list: Sequence[Sequence[int]],
) -> list[tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]]:
    """``flat_features`` for many sentences at once, vectorised over the whole batch.

    All sentences form one forest; depths, subtree heights, subtree spans (for the projectivity
    test: every subtree's yield must be contiguous) and the LCAs of adjacent words are computed
    level by level for all words together. Non-projective sentences, and any batch with invalid
    heads, go through the per-sentence path (which lifts, or raises a located error).
    """
    B = len(heads_list)
    if B == 0:
        return []
    lengths = np.fromiter((len(h) for h in heads_list), np.int64, B)
    if (lengths == 0).any():
        return [flat_features(h) for h in heads_list]
    offsets = np.zeros(B + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    N = int(offsets[-1])
    sent = np.repeat(np.arange(B), lengths)
    idx = np.arange(N)
    local = idx - offsets[sent]
    h = np.fromiter((x for hs in heads_list for x in hs), np.int64, N)
    if ((h < 0) | (h > lengths[sent]) | (h - 1 == local)).any():
        return [flat_features(hs) for hs in heads_list]
    parent = np.where(h > 0, h - 1 + offsets[sent], -1)

    depth = np.zeros(N, np.int64)
    cur = parent.copy()
    for _ in range(int(lengths.max()) + 1):
        alive = np.flatnonzero(cur >= 0)
        if alive.size == 0:
            break
        depth[alive] += 1
        cur[alive] = parent[cur[alive]]
    else:
        return [flat_features(hs) for hs in heads_list]  # a cycle: raise it per sentence

    height = np.zeros(N, np.int64)
    lo, hi, size = local.copy(), local.copy(), np.ones(N, np.int64)
    order = np.argsort(-depth, kind="stable")
    bounds = np.searchsorted(-depth[order], np.arange(-int(depth.max()), 0))
    for k in range(len(bounds)):  # deepest level first
        end = bounds[k + 1] if k + 1 < len(bounds) else len(order)
        nodes = order[bounds[k] : end]
        nodes = nodes[depth[nodes] > 0]
        par = parent[nodes]
        np.maximum.at(height, par, height[nodes] + 1)
        np.minimum.at(lo, par, lo[nodes])
        np.maximum.at(hi, par, hi[nodes])
        np.add.at(size, par, size[nodes])
    nonprojective = set(np.unique(sent[hi - lo + 1 != size]).tolist())

    # LCA of each adjacent pair inside a sentence
    same = sent[:-1] == sent[1:]
    a, b = idx[:-1][same].copy(), idx[1:][same].copy()
    da, db = depth[a].copy(), depth[b].copy()
    while (m := np.flatnonzero(da > db)).size:
        a[m], da[m] = parent[a[m]], da[m] - 1
    while (m := np.flatnonzero(db > da)).size:
        b[m], db[m] = parent[b[m]], db[m] - 1
    while (m := np.flatnonzero(a != b)).size:
        a[m], b[m] = parent[a[m]], parent[b[m]]
    roots = np.flatnonzero(parent < 0)
    root_height = np.zeros(B, np.int64)
    np.maximum.at(root_height, sent[roots], height[roots])
    n_roots = np.bincount(sent[roots], minlength=B)
    split_sent = sent[:-1][same]
    dist = np.where(a >= 0, height[np.maximum(a, 0)], root_height[split_sent] + 1)

    has_deps = np.bincount(parent[parent >= 0], minlength=N) > 0
    host = np.where(has_deps | (parent < 0), idx, parent)
    multi = n_roots[sent] > 1
    layers = depth[host] + multi + 2
    layers = np.where((parent < 0) & ~has_deps, np.where(multi, 2, 1), layers)

    out: list[tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]] = []
    split_offsets = offsets - np.arange(B + 1)  # n-1 splits per sentence
    dist16, layers16 = dist.astype(np.int16), layers.astype(np.int16)
    for s in range(B):
        if s in nonprojective:
            out.append(flat_features(heads_list[s]))
        else:
            out.append(
                (
                    dist16[split_offsets[s] : split_offsets[s + 1]],
                    layers16[offsets[s] : offsets[s + 1]],
                )
            )
    return out
