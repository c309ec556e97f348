"""Hard (strict, inclusive, binarised) and soft SLR, worked numbers on the running example
(docs/papers/gated-slr.md, "Syntactic local range")."""

import numpy as np
import pytest

from synattn_shared.syntax.slr import slr_hard_mask, slr_intervals, slr_log_mask, slr_mask

D = [3, 2, 1, 2, 1, 3]

STRICT = [
    [1, 1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 0, 0, 0],
    [0, 1, 1, 1, 0, 0, 0],
    [0, 0, 1, 1, 1, 1, 0],
    [0, 0, 1, 1, 1, 1, 0],
    [0, 0, 0, 0, 1, 1, 1],
    [0, 1, 1, 1, 1, 1, 1],
]

SOFT_TAU1 = [
    [1.0000, 1.0000, 0.8808, 0.8650, 0.7618, 0.7481, 0.3741],
    [1.0000, 1.0000, 1.0000, 0.8808, 0.4404, 0.3879, 0.0462],
    [0.1192, 1.0000, 1.0000, 1.0000, 0.1192, 0.0596, 0.0011],
    [0.0021, 0.1192, 1.0000, 1.0000, 1.0000, 0.8808, 0.1050],
    [0.0525, 0.4404, 0.8808, 1.0000, 1.0000, 1.0000, 0.0180],
    [0.0001, 0.0071, 0.0596, 0.1192, 1.0000, 1.0000, 1.0000],
    [0.3741, 0.7481, 0.8494, 0.8650, 0.9820, 1.0000, 1.0000],
]

SOFT_TAU10 = [
    [1.0000, 1.0000, 0.5498, 0.3292, 0.1810, 0.1084, 0.0542],
    [1.0000, 1.0000, 1.0000, 0.5498, 0.2749, 0.1512, 0.0680],
    [0.4502, 1.0000, 1.0000, 1.0000, 0.4502, 0.2251, 0.0903],
    [0.1807, 0.4502, 1.0000, 1.0000, 1.0000, 0.5498, 0.2475],
    [0.1238, 0.2749, 0.5498, 1.0000, 1.0000, 1.0000, 0.4013],
    [0.0407, 0.1013, 0.2251, 0.4502, 1.0000, 1.0000, 1.0000],
    [0.0542, 0.1084, 0.1971, 0.3292, 0.5987, 1.0000, 1.0000],
]

LOG_TAU10 = [
    [0.0000, 0.0000, -0.5981, -1.1112, -1.7093, -2.2223, -2.9155],
    [0.0000, 0.0000, 0.0000, -0.5981, -1.2913, -1.8894, -2.6876],
    [-0.7981, 0.0000, 0.0000, 0.0000, -0.7981, -1.4913, -2.4043],
    [-1.7112, -0.7981, 0.0000, 0.0000, 0.0000, -0.5981, -1.3963],
    [-2.0894, -1.2913, -0.5981, 0.0000, 0.0000, 0.0000, -0.9130],
    [-3.2024, -2.2894, -1.4913, -0.7981, 0.0000, 0.0000, 0.0000],
    [-2.9155, -2.2223, -1.6242, -1.1112, -0.5130, 0.0000, 0.0000],
]

INCLUSIVE_FLIPS = [(0, 6), (1, 4), (1, 5), (4, 1), (6, 0)]


def test_hard_strict_table_and_intervals():
    assert slr_hard_mask(D, "strict").astype(int).tolist() == STRICT
    L, R = slr_intervals(D, "strict")
    assert L.tolist() == [0, 0, 1, 2, 2, 4, 1]
    assert R.tolist() == [5, 3, 3, 5, 5, 6, 6]


def test_hard_inclusive_differs_in_five_cells():
    L, R = slr_intervals(D, "inclusive")
    assert L.tolist() == [0, 0, 1, 2, 1, 4, 0]
    assert R.tolist() == [6, 5, 3, 5, 5, 6, 6]
    diff = np.argwhere(slr_hard_mask(D, "inclusive") != np.array(STRICT, bool))
    assert sorted(map(tuple, diff.tolist())) == INCLUSIVE_FLIPS


def test_hard_right_binarised_rows():
    m = slr_hard_mask([5, 3, 1, 2, 1, 4], "strict").astype(int)
    assert m[0].tolist() == [1] * 7
    assert m[1].tolist() == [1, 1, 1, 1, 1, 1, 0]
    assert m[2:].tolist() == STRICT[2:]


def test_hard_log_mask_equals_interval_form():
    log_m = slr_log_mask(D, mode="hard", ties="strict")
    assert np.isfinite(log_m).astype(int).tolist() == STRICT
    assert set(np.unique(log_m[np.isfinite(log_m)])) == {0.0}


@pytest.mark.parametrize(("tau", "table"), [(1.0, SOFT_TAU1), (10.0, SOFT_TAU10)])
def test_soft_tables(tau, table):
    np.testing.assert_allclose(slr_mask(D, tau=tau), table, atol=1e-4)


def test_soft_log_bias_tau10():
    np.testing.assert_allclose(slr_log_mask(D, tau=10.0), LOG_TAU10, atol=1e-4)


def test_hand_checks():
    m10 = slr_mask(D, tau=10.0)
    assert m10[0, 2] == pytest.approx(0.549834, abs=1e-6)
    assert m10[4, 0] == pytest.approx(0.123758, abs=1e-6)
    assert slr_mask(D, tau=1.0)[0, 6] == pytest.approx(0.374073, abs=1e-6)


def test_small_tau_limit_has_half_at_ties():
    m = slr_mask(D, tau=1e-3)
    expected = np.array(STRICT, float)
    for i, j in INCLUSIVE_FLIPS:
        expected[i, j] = 0.5
    np.testing.assert_allclose(m, expected, atol=1e-6)


def test_edge_cases_n1_n2():
    assert slr_mask([], tau=10.0).tolist() == [[1.0]]
    assert slr_hard_mask([]).tolist() == [[True]]
    assert slr_mask([4], tau=10.0).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_batched_padding_rows_are_zero_and_real_block_unchanged():
    single = slr_log_mask(D, tau=10.0)
    padded = np.array([[*D, 1000.0, 1000.0]], np.float32)
    batch = slr_log_mask(padded, tau=10.0, lengths=[7])
    assert batch.shape == (1, 1, 9, 9)
    np.testing.assert_allclose(batch[0, 0, :7, :7], single, atol=1e-6)
    assert (batch[0, 0, 7:] == 0).all()
