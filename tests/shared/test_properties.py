"""Property tests on random trees: distances, SLR, local phrases, derived trees and subwords
(docs/papers/)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from synattn_shared.syntax.dependency import dea_keep_mask, dep_hops, validate_heads
from synattn_shared.syntax.derived import (
    derive_tree,
    flat_features,
    nonprojective_arcs,
    projectivise,
)
from synattn_shared.syntax.distance import distances_to_shape, shape_distances
from synattn_shared.syntax.phrase import local_phrase_spans
from synattn_shared.syntax.slr import slr_hard_mask, slr_log_mask
from synattn_shared.syntax.subword import expand_distances, expand_matrix
from synattn_shared.syntax.trees import (
    Shape,
    binarize_right,
    canonical_shape,
    collapse,
    leaf_depths,
    shape_leaves,
)
from tests.shared.strategies import head_arrays, shapes

# ---- tree-based reference definitions -------------------------------------------------------


def height(shape: Shape) -> int:
    """Height of a tree shape: a leaf is 0, a node one more than its highest child."""
    return 0 if isinstance(shape, int) else 1 + max(height(c) for c in shape)


def parents_of(shape: Shape) -> dict[int, list[Shape]]:
    """Leaf -> its chain of ancestors (innermost first) as (node, child) pairs."""
    chains: dict[int, list[tuple[list[Shape], int]]] = {}

    def walk(node: Shape, path: list[tuple[list[Shape], int]]) -> None:
        if isinstance(node, int):
            chains[node] = list(reversed(path))
            return
        for k, child in enumerate(node):
            walk(child, [*path, (node, k)])

    walk(shape, [])
    return chains


def tree_slr(shape: Shape, all_siblings: bool) -> np.ndarray:
    """Hard SLR from the tree definition (pre- and post-text ranges)."""
    n = len(shape_leaves(shape))
    m = np.eye(n, dtype=bool)
    for t, chain in parents_of(shape).items():
        for node, k in chain:  # climb: first node that is not the leftmost child
            if k > 0:
                first = node[0] if all_siblings else node[k - 1]
                m[t, min(shape_leaves(first)) : t + 1] = True
                break
        for node, k in chain:  # mirror: first node that is not the rightmost child
            if k < len(node) - 1:
                last = node[-1] if all_siblings else node[k + 1]
                m[t, t : max(shape_leaves(last)) + 1] = True
                break
    return m


def rule1_spans(shape: Shape) -> list[tuple[int, int]]:
    """LP(i) = the span of i's parent in the collapsed tree (Rule 1)."""
    chains = parents_of(shape)
    out = []
    for i in range(len(chains)):
        if not chains[i]:
            out.append((i, i + 1))
            continue
        leaves = shape_leaves(chains[i][0][0])
        out.append((min(leaves), max(leaves) + 1))
    return out


def is_projective_arc(parent: np.ndarray, d: int) -> bool:
    h = parent[d]
    if h < 0:
        return True
    for k in range(min(h, d) + 1, max(h, d)):
        a = k
        while a >= 0 and a != h:
            a = parent[a]
        if a != h:
            return False
    return True


# ---- properties -----------------------------------------------------------------------------


@given(shapes())
def test_distance_tree_round_trip(shape):
    d = shape_distances(shape)
    n = len(shape_leaves(shape))
    assert d.shape == (n - 1,)
    assert distances_to_shape(d) == canonical_shape(shape)
    if n >= 2:
        assert d.min() >= 1
        assert d.max() == height(canonical_shape(shape))  # the root's split is the highest


@given(st.lists(st.integers(-5, 20), max_size=15))
def test_inverse_of_any_vector_is_canonical(values):
    tree = distances_to_shape(np.array(values))
    assert shape_leaves(tree) == list(range(len(values) + 1))
    canon = shape_distances(tree)
    assert distances_to_shape(canon) == tree


@given(shapes())
def test_hard_slr_inclusive_flat_equals_tree_definition_all_siblings(shape):
    d = shape_distances(shape)
    assert (slr_hard_mask(d, "inclusive") == tree_slr(shape, all_siblings=True)).all()


@given(shapes())
def test_hard_slr_strict_flat_equals_tree_definition_adjacent_sibling(shape):
    d = shape_distances(shape)
    assert (slr_hard_mask(d, "strict") == tree_slr(shape, all_siblings=False)).all()


@given(shapes())
def test_hard_slr_binarised_equals_tree_definition_on_binarised_tree(shape):
    binary = binarize_right(shape)
    d = shape_distances(shape, "right")
    assert (slr_hard_mask(d, "strict") == tree_slr(binary, all_siblings=True)).all()
    assert (slr_hard_mask(d, "strict") == tree_slr(binary, all_siblings=False)).all()


@given(shapes(), st.integers(-3, 50), st.integers(1, 4))
def test_hard_slr_depends_only_on_the_tree(shape, shift, scale):
    d = shape_distances(shape)
    for ties in ("strict", "inclusive"):
        base = slr_hard_mask(d, ties)
        assert (slr_hard_mask(d * scale + shift, ties) == base).all()


@given(shapes(), st.floats(0.5, 20), st.integers(-5, 5))
def test_soft_slr_properties(shape, tau, shift):
    d = shape_distances(shape).astype(np.float64)
    log_m = slr_log_mask(d, tau=tau)
    n = d.shape[0] + 1
    assert log_m.shape == (n, n)
    assert (log_m <= 0).all() and np.isfinite(log_m).all()
    idx = np.arange(n)
    near = np.abs(idx[:, None] - idx[None, :]) <= 1
    assert (log_m[near] == 0).all()
    np.testing.assert_allclose(slr_log_mask(d + shift, tau=tau), log_m, atol=1e-4)
    # rows never increase moving away from the diagonal
    for i in range(n):
        assert (np.diff(log_m[i, i:]) <= 1e-6).all()
        assert (np.diff(log_m[i, : i + 1]) >= -1e-6).all()
    # equals the log of the product form where nothing underflows
    f = lambda x: 1 / (1 + np.exp(-2 * x / tau))  # noqa: E731
    prod = np.ones((n, n))
    for i in range(n):
        for j in range(n):
            if j <= i - 2:
                prod[i, j] = np.prod([f(d[i - 1] - d[t]) for t in range(j, i - 1)])
            elif j >= i + 2:
                prod[i, j] = np.prod([f(d[i] - d[t]) for t in range(i + 1, j)])
    np.testing.assert_allclose(np.exp(log_m), prod, rtol=1e-4, atol=1e-7)


@given(shapes(max_leaves=12), st.integers(1, 11))
def test_slr_truncation_commutes(shape, keep):
    d = shape_distances(shape)
    n = d.shape[0] + 1
    k = min(keep, n)
    full = slr_log_mask(d, tau=10.0)
    np.testing.assert_allclose(slr_log_mask(d[: k - 1], tau=10.0), full[:k, :k], atol=1e-5)


@given(shapes())
def test_local_phrases_from_distances_equal_rule1(shape):
    start, end = local_phrase_spans(shape_distances(shape))
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == rule1_spans(shape)


@given(head_arrays(max_roots=3))
def test_dependency_mask_holds_arcs_and_diagonal(heads):
    keep = dea_keep_mask(heads)
    n = len(heads)
    assert keep[np.arange(n), np.arange(n)].all()
    for i, h in enumerate(heads):
        if h:
            assert keep[i, h - 1] and keep[h - 1, i]
    assert (keep == keep.T).all()
    assert keep.sum() == n + 2 * sum(1 for h in heads if h)
    assert ((dep_hops(heads) <= 1) == keep).all()


@given(head_arrays(max_len=14, max_roots=2))
def test_dep_hops_equals_bfs(heads):
    n = len(heads)
    adj = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h:
            adj[i].append(h - 1)
            adj[h - 1].append(i)
    hops = dep_hops(heads)
    for s in range(n):
        dist = {s: 0}
        frontier = [s]
        while frontier:
            nxt = []
            for u in frontier:
                for v in adj[u]:
                    if v not in dist:
                        dist[v] = dist[u] + 1
                        nxt.append(v)
            frontier = nxt
        assert [dist.get(j, 255) for j in range(n)] == hops[s].tolist()


@settings(max_examples=150)
@given(head_arrays(max_len=18, max_roots=2))
def test_derived_tree_keeps_order_and_lifts_only_nonprojective_arcs(heads):
    parent = validate_heads(heads).copy()
    words = [f"w{i}" for i in range(len(heads))]
    # replay the lifting, checking each lifted arc is non-projective when it is lifted
    while (bad := nonprojective_arcs(parent)).size:
        assert all(not is_projective_arc(parent, int(d)) for d in bad)
        length = np.abs(parent[bad] - bad)
        d = int(bad[np.lexsort((bad, length))[0]])
        parent[d] = parent[parent[d]] if parent[d] >= 0 else -1
    assert all(is_projective_arc(parent, d) for d in range(len(heads)))
    assert projectivise(heads).tolist() == parent.tolist()
    for scheme in ("flat", "two_level", "binary"):
        tree = derive_tree(words, heads, scheme=scheme)
        assert tree.leaves() == words
    flat = derive_tree(words, heads, scheme="flat")
    d, layers = flat_features(heads)
    assert d.tolist() == shape_distances(collapse(flat)).tolist()
    assert layers.tolist() == leaf_depths(flat)


@given(head_arrays(max_len=12), st.data())
def test_projective_input_returned_unchanged(heads, data):
    parent = validate_heads(heads)
    if all(is_projective_arc(parent, d) for d in range(len(heads))):
        assert projectivise(heads).tolist() == parent.tolist()


@given(head_arrays(max_len=12), st.data())
def test_subword_expansion_preserves_blocks(heads, data):
    n = len(heads)
    pieces = data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    s2w = [w for w, c in enumerate(pieces) for _ in range(c)] + [-1]
    pad = data.draw(st.integers(0, 3))
    s2w_padded = s2w + [-1] * pad
    word = dea_keep_mask(heads)
    sub = expand_matrix(word, s2w_padded, False, True)
    w = np.array(s2w)
    real = np.flatnonzero(w >= 0)
    # every piece gets its word's row and column: pieces of one word are interchangeable
    assert (sub[np.ix_(real, real)] == word[np.ix_(w[real], w[real])]).all()
    # collapsing pieces back to one per word recovers the word matrix exactly
    firsts = [s2w.index(i) for i in range(n)]
    assert (sub[np.ix_(firsts, firsts)] == word).all()
    # extra padding changes nothing on real positions
    assert (expand_matrix(word, s2w, False, True) == sub[: len(s2w), : len(s2w)]).all()
    d = shape_distances(distances_to_shape(np.arange(n - 1) % 3 + 1))
    unpadded = expand_distances(d, s2w)
    assert (expand_distances(d, s2w_padded)[: len(s2w) - 1] == unpadded).all()


@settings(max_examples=60)
@given(st.lists(head_arrays(max_len=16, max_roots=3), min_size=1, max_size=8))
def test_batched_flat_features_equal_per_sentence(batch):
    from synattn_shared.syntax.derived import flat_features_batch

    got = flat_features_batch(batch)
    for heads, (d, layers) in zip(batch, got, strict=True):
        want_d, want_l = flat_features(heads)
        assert d.tolist() == want_d.tolist()
        assert layers.tolist() == want_l.tolist()
