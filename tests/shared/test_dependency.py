"""DEA keep-mask and dependency hops on the running example, and invalid heads
(docs/papers/rhe-sea.md, "DEA")."""

import numpy as np
import pytest

from synattn_shared.syntax.dependency import dea_bias, dea_keep_mask, dep_hops, validate_heads
from tests.conftest import RUNNING_HEADS

DEA = [
    [1, 1, 0, 0, 0, 0, 0],
    [1, 1, 0, 1, 1, 0, 1],
    [0, 0, 1, 1, 0, 0, 0],
    [0, 1, 1, 1, 0, 0, 0],
    [0, 1, 0, 0, 1, 1, 0],
    [0, 0, 0, 0, 1, 1, 0],
    [0, 1, 0, 0, 0, 0, 1],
]
HOPS = [
    [0, 1, 3, 2, 2, 3, 2],
    [1, 0, 2, 1, 1, 2, 1],
    [3, 2, 0, 1, 3, 4, 3],
    [2, 1, 1, 0, 2, 3, 2],
    [2, 1, 3, 2, 0, 1, 2],
    [3, 2, 4, 3, 1, 0, 3],
    [2, 1, 3, 2, 2, 3, 0],
]


def test_dea_keep_mask_and_bias():
    assert dea_keep_mask(RUNNING_HEADS).astype(int).tolist() == DEA
    bias = dea_bias(RUNNING_HEADS)
    assert bias.dtype == np.float32
    assert ((bias == 0) == np.array(DEA, bool)).all()
    assert np.isneginf(bias[~np.array(DEA, bool)]).all()


def test_dep_hops_table():
    assert dep_hops(RUNNING_HEADS).tolist() == HOPS
    assert (dep_hops(RUNNING_HEADS) <= 1).astype(int).tolist() == DEA


def test_multi_root_is_unreachable_across_trees():
    hops = dep_hops([2, 0, 2, 0, 4])
    assert hops[0, 3] == 255 and hops[3, 0] == 255
    assert hops[0, 2] == 2


def test_single_word():
    assert dep_hops([0]).tolist() == [[0]]
    assert dea_bias([0]).tolist() == [[0.0]]


@pytest.mark.parametrize(
    ("heads", "message"),
    [
        ([2, 3, 1], "cycle"),
        ([0, 9], "outside"),
        ([0, -1], "outside"),
        ([1, 0], "its own head"),
        ([], "empty"),
    ],
)
def test_invalid_heads_are_rejected(heads, message):
    with pytest.raises(ValueError, match=message):
        validate_heads(heads)
