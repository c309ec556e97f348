"""Subword-level SLR, DEA, hops and RP indices with </s> (docs/papers/index.md, "Subwords,
</s> and padding"; docs/papers/gated-slr.md, "SLR at subword level")."""

import numpy as np
import pytest

from synattn_shared.syntax.dependency import HOPS_UNREACHABLE, dea_keep_mask, dep_hops
from synattn_shared.syntax.phrase import (
    RP_OUT,
    local_phrase_spans,
    relative_phrasal_positions,
    rp_index,
)
from synattn_shared.syntax.slr import slr_hard_mask, slr_log_mask
from synattn_shared.syntax.subword import (
    check_word_map,
    expand_distances,
    expand_matrix,
    word_ids_from_pieces,
)
from tests.conftest import RUNNING_HEADS, RUNNING_S2W, RUNNING_SUBWORDS

D_SUB = [3, 2, 1, 2, 1, 0, 3, 1000]
HARD_SUB = [
    [1, 1, 1, 1, 1, 1, 1, 0, 0],
    [1, 1, 1, 1, 0, 0, 0, 0, 0],
    [0, 1, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 1, 1, 1, 1, 1, 0, 0],
    [0, 0, 1, 1, 1, 1, 1, 0, 0],
    [0, 0, 0, 0, 1, 1, 1, 0, 0],
    [0, 0, 0, 0, 0, 1, 1, 1, 0],
    [0, 1, 1, 1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 1, 1, 1, 1],
]
DEA_SUB = [
    [1, 1, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 1, 1, 0, 0, 1, 0],
    [0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 1, 1, 1, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 1, 1, 1, 0, 0],
    [0, 0, 0, 0, 1, 1, 1, 0, 0],
    [0, 0, 0, 0, 1, 1, 1, 0, 0],
    [0, 1, 0, 0, 0, 0, 0, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 1],
]


def test_word_ids_from_bpe_pieces():
    assert word_ids_from_pieces(RUNNING_SUBWORDS, "bpe") == list(RUNNING_S2W)
    assert word_ids_from_pieces(["▁Shar", "on", "▁."], "sentencepiece") == [0, 0, 1]
    assert word_ids_from_pieces(["Shar", "##on", "."], "wordpiece") == [0, 0, 1]


def test_distance_expansion():
    assert expand_distances([3, 2, 1, 2, 1, 3], RUNNING_S2W).tolist() == D_SUB


def test_subword_hard_slr():
    assert slr_hard_mask(D_SUB, "strict").astype(int).tolist() == HARD_SUB


def test_subword_soft_rows_and_underflow_free_log():
    log_m = slr_log_mask(D_SUB, tau=10.0)
    m = np.exp(log_m)
    np.testing.assert_allclose(
        m[6], [0.0116, 0.0326, 0.0813, 0.1807, 0.4502, 1.0, 1.0, 1.0, 0.0], atol=1e-4
    )
    np.testing.assert_allclose(
        m[7], [0.0350, 0.0700, 0.1272, 0.2125, 0.3865, 0.6457, 1.0, 1.0, 1.0], atol=1e-4
    )
    np.testing.assert_allclose(m[8], np.ones(9), atol=1e-6)
    assert log_m[0, 8] == pytest.approx(-202.7529, abs=1e-3)


def test_subword_dea_and_hops():
    keep = expand_matrix(dea_keep_mask(RUNNING_HEADS), RUNNING_S2W, False, True)
    assert keep.astype(int).tolist() == DEA_SUB
    hops = expand_matrix(dep_hops(RUNNING_HEADS), RUNNING_S2W, HOPS_UNREACHABLE, 0)
    word = dep_hops(RUNNING_HEADS)
    idx = [0, 1, 2, 3, 4, 5, 5, 6]
    assert (hops[:8, :8] == word[idx][:, idx]).all()
    assert hops[5, 6] == 0
    assert hops[8, :8].tolist() == [255] * 8 and hops[8, 8] == 0


def test_subword_rp_index_literal_clip():
    start, end = local_phrase_spans([3, 2, 1, 2, 1, 3])
    rp = relative_phrasal_positions([3, 3, 4, 4, 4, 5, 2], start, end)
    sub = rp_index(expand_matrix(rp, RUNNING_S2W, RP_OUT, 0), 2)
    word = rp_index(rp, 2)
    idx = [0, 1, 2, 3, 4, 5, 5, 6]
    assert (sub[:8, :8] == word[idx][:, idx]).all()
    assert sub[8, :8].tolist() == [4] * 8 and sub[:8, 8].tolist() == [4] * 8
    assert sub[8, 8] == 2


def test_bad_word_maps_are_rejected():
    with pytest.raises(ValueError):
        check_word_map([0, 2, 3])
    with pytest.raises(ValueError, match="parse has 3"):
        check_word_map([0, 1, -1], n_words=3)
    with pytest.raises(ValueError):
        expand_distances([1, 1], [0, 2, -1])


def test_bos_behaves_like_eos():
    d = expand_distances([3, 2, 1, 2, 1, 3], [-1, *RUNNING_S2W])
    assert d[0] == 1000 and d[-1] == 1000
