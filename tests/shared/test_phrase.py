"""Layers, local phrases, RP, clipped indices and the LPEA table on the running example
(docs/papers/rhe-sea.md, "LPEA")."""

import numpy as np

from synattn_shared.syntax.phrase import (
    RP_OUT,
    local_phrase_spans,
    related,
    relative_phrasal_positions,
    rp_index,
)
from synattn_shared.syntax.reference import phrasal_bias_table

D = [3, 2, 1, 2, 1, 3]
LAYERS = [3, 3, 4, 4, 4, 5, 2]
OUT = RP_OUT
RP = [
    [0, 0, 1, 1, 1, 2, -1],
    [0, 0, 1, 1, 1, 2, -1],
    [-1, -1, 0, 0, OUT, OUT, -2],
    [-1, -1, 0, 0, OUT, OUT, -2],
    [-1, -1, OUT, OUT, 0, 1, -2],
    [-2, -2, OUT, OUT, -1, 0, -3],
    [1, 1, 2, 2, 2, 3, 0],
]
IDX_K2 = [
    [2, 2, 3, 3, 3, 4, 1],
    [2, 2, 3, 3, 3, 4, 1],
    [1, 1, 2, 2, 4, 4, 0],
    [1, 1, 2, 2, 4, 4, 0],
    [1, 1, 4, 4, 2, 3, 0],
    [0, 0, 4, 4, 1, 2, 0],
    [3, 3, 4, 4, 4, 4, 2],
]
P = [
    [0.0000, 0.0000, -1.5232, -1.5232, -1.5232, -1.5232, -0.7616],
    [0.0000, 0.0000, -1.5232, -1.5232, -1.5232, -1.5232, -0.7616],
    [-0.7616, -0.7616, 0.0000, 0.0000, -1.5232, -1.5232, -0.7616],
    [-0.7616, -0.7616, 0.0000, 0.0000, -1.5232, -1.5232, -0.7616],
    [-0.7616, -0.7616, -1.5232, -1.5232, 0.0000, -1.5232, -0.7616],
    [-0.7616, -0.7616, -1.5232, -1.5232, -0.7616, 0.0000, -0.7616],
    [-1.5232, -1.5232, -1.5232, -1.5232, -1.5232, -1.5232, 0.0000],
]


def test_local_phrase_spans():
    start, end = local_phrase_spans(D)
    spans = list(zip(start.tolist(), end.tolist(), strict=True))
    assert spans == [(0, 7), (1, 6), (2, 4), (2, 4), (4, 6), (4, 6), (0, 7)]


def test_unrelated_pairs():
    start, end = local_phrase_spans(D)
    rel = related(start, end)
    unrelated = {tuple(p) for p in np.argwhere(~rel).tolist()}
    assert unrelated == {(i, j) for i in (2, 3) for j in (4, 5)} | {
        (j, i) for i in (2, 3) for j in (4, 5)
    }


def test_rp_matrix_and_seed_cells():
    start, end = local_phrase_spans(D)
    rp = relative_phrasal_positions(LAYERS, start, end)
    assert rp.tolist() == RP
    assert rp[1, 3] == 1  # 1-based RP_{2,4} (held, talk)
    assert rp[2, 5] == RP_OUT  # 1-based row 3, column 6 (a, Sharon)


def test_rp_index_clip_and_extra_index():
    rp = np.array(RP, np.int16)
    assert rp_index(rp, 2).tolist() == IDX_K2
    extra = rp_index(rp, 2, "extra_index")
    assert (extra[rp == RP_OUT] == 5).all()
    assert (extra[rp != RP_OUT] == np.array(IDX_K2)[rp != RP_OUT]).all()


def test_lpea_tiny_parameter_check():
    emb = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])  # w_-1, w_0, w_+1
    beta = phrasal_bias_table(emb, np.eye(2), np.zeros(2), np.array([1.0, -2.0]))
    np.testing.assert_allclose(beta, [-0.7616, 0.0, -1.5232], atol=1e-4)
    idx = rp_index(np.array(RP, np.int16), 1)
    np.testing.assert_allclose(beta[idx], P, atol=1e-4)


def test_single_word_phrase():
    start, end = local_phrase_spans([])
    assert (start.tolist(), end.tolist()) == ([0], [1])
    assert relative_phrasal_positions([1], start, end).tolist() == [[0]]
