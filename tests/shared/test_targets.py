"""Worked examples of RHE's measures (docs/papers/rhe-sea.md, "RHE") and of the baselines'
targets (docs/papers/index.md, "Baselines")."""

import numpy as np
import pytest

from synattn_shared.syntax.dependency import dea_keep_mask, dep_hops
from synattn_shared.syntax.reference import (
    head_confidence,
    head_label,
    localness_bias,
    pascal_density,
    syntactic_attention,
)
from synattn_shared.syntax.targets import (
    is_punctuation,
    lisa_targets,
    pascal_centres,
    shaw_index,
    sla_keep_mask,
)
from tests.conftest import RUNNING_HEADS, RUNNING_S2W, RUNNING_UPOS, RUNNING_WORDS

SLA_M1 = [
    [1, 1, 0, 1, 1, 0, 1],
    [1, 1, 1, 1, 1, 0, 1],
    [1, 1, 1, 1, 1, 0, 1],
    [0, 1, 1, 1, 1, 1, 0],
    [0, 1, 1, 1, 1, 1, 0],
    [0, 1, 0, 0, 1, 1, 1],
    [0, 1, 0, 0, 1, 1, 1],
]


def test_rhe_uniform_head_is_redundant():
    keep = dea_keep_mask(RUNNING_HEADS)
    all7 = np.ones(7, bool)
    uniform = np.full((7, 7), 1 / 7)
    conf = head_confidence(uniform, all7, all7)
    syn = syntactic_attention(uniform, keep, all7, all7)
    assert conf == pytest.approx(0.142857, abs=1e-6)
    assert 1 / (1 + np.exp(-conf)) == pytest.approx(0.535654, abs=1e-6)
    assert syn == pytest.approx(19 / 49, abs=1e-9)
    assert head_label(conf, syn) == 0


def test_rhe_dependency_uniform_head_is_important():
    keep = dea_keep_mask(RUNNING_HEADS)
    all7 = np.ones(7, bool)
    dep_uniform = keep / keep.sum(axis=1, keepdims=True)
    conf = head_confidence(dep_uniform, all7, all7)
    assert conf == pytest.approx(0.409524, abs=1e-6)
    assert 1 / (1 + np.exp(-conf)) == pytest.approx(0.600974, abs=1e-6)
    assert syntactic_attention(dep_uniform, keep, all7, all7) == pytest.approx(1.0)
    assert head_label(conf, 1.0) == 1


def test_shaw_index_matrix():
    idx = shaw_index(5, 2)
    assert idx[0].tolist() == [2, 3, 4, 4, 4]
    assert idx[4].tolist() == [0, 0, 0, 1, 2]


def test_yang_localness_example():
    np.testing.assert_allclose(
        localness_bias(3.5, 2.0, 7),
        [-6.125, -3.125, -1.125, -0.125, -0.125, -1.125, -3.125],
    )


def test_lisa_targets():
    assert lisa_targets(RUNNING_HEADS, RUNNING_S2W).tolist() == [1, 1, 3, 1, 1, 4, 4, 1, 8]


def test_pascal_centres_and_density():
    assert pascal_centres(RUNNING_HEADS, RUNNING_S2W).tolist() == [1, 1, 3, 1, 1, 4, 4, 1, 8]
    # talk split into two pieces at positions 3 and 4: the centre for "a" is 3.5
    split = [0, 1, 2, 3, 3, 4, 5, 5, 6, -1]
    assert pascal_centres(RUNNING_HEADS, split)[2] == pytest.approx(3.5)
    np.testing.assert_allclose(
        pascal_density([1.0], 7)[0],
        [0.2420, 0.3989, 0.2420, 0.0540, 0.0044, 0.0001, 0.0000],
        atol=1e-4,
    )


def test_sla_keep_mask_m1():
    hops = dep_hops(RUNNING_HEADS)
    assert (hops <= 1).astype(int).tolist() == dea_keep_mask(RUNNING_HEADS).astype(int).tolist()
    assert sla_keep_mask(hops, m=1).astype(int).tolist() == SLA_M1
    punct = is_punctuation(RUNNING_WORDS, RUNNING_UPOS)
    with_punct = sla_keep_mask(hops, m=1, is_punct=punct)
    assert with_punct[:, 6].all()
    assert is_punctuation(RUNNING_WORDS) == punct


def test_sla_specials_are_global():
    hops = dep_hops(RUNNING_HEADS)
    sub = sla_keep_mask(hops, m=1, subword_to_word=RUNNING_S2W)
    assert sub[8].all() and sub[:, 8].all()
