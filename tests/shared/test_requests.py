"""Typed feature requests and their one builder: each request equals the spec's feature,
padding uses each request's fill, equal requests share an array and different options don't."""

from __future__ import annotations

import numpy as np
import pytest

from synattn_shared.defaults import RP_CLIP, SLR_TAU
from synattn_shared.features import to_row
from synattn_shared.materialise import MaterialiseOptions, materialise
from synattn_shared.records import SentenceRecord
from synattn_shared.requests import (
    DeaBias,
    DeaMask,
    LisaTarget,
    MissingParse,
    PascalCentre,
    RpIndex,
    SlaKeep,
    SlrBias,
    WordIds,
    build_features,
)
from synattn_shared.syntax.dependency import dep_hops
from synattn_shared.syntax.targets import (
    is_punctuation,
    lisa_targets,
    pascal_centres,
    sla_keep_mask,
)
from tests.conftest import RUNNING_HEADS, RUNNING_TREE, RUNNING_UPOS, RUNNING_WORDS


def row(heads: bool = True) -> dict:  # type: ignore[type-arg]
    rec = SentenceRecord(sent_id="run", words=RUNNING_WORDS, upos=RUNNING_UPOS,
                         dep_head=RUNNING_HEADS if heads else None, tree=RUNNING_TREE)  # fmt: skip
    return to_row(rec)


# a subword map: word 1 split in two pieces, then </s> (-1)
S2W = np.array([0, 1, 1, 2, 3, 4, 5, 6, -1])


def test_defaults_are_the_specs() -> None:
    assert SlrBias().tau == SLR_TAU == 10.0 and RpIndex().k == RP_CLIP == 6
    assert SlaKeep().m == 3 and SlrBias().binarize == "right"


def test_each_request_is_its_spec_feature() -> None:
    r = row()
    reqs = (SlrBias(tau=4.0), DeaMask(), DeaBias(), RpIndex(k=2, outside="mask"), SlaKeep(),
            LisaTarget(), PascalCentre(), WordIds())  # fmt: skip
    out = build_features([r], [S2W], reqs)
    opts = MaterialiseOptions(tau=4.0, rp_clip=2, lp_outside="mask")
    names = ("slr_bias", "dea_mask", "dea_bias", "rp_index")
    mats = materialise(r, names, opts, S2W.tolist())
    np.testing.assert_array_equal(out[SlrBias(tau=4.0)][0], mats["slr_bias"])
    np.testing.assert_array_equal(out[DeaMask()][0], mats["dea_mask"])
    np.testing.assert_array_equal(out[DeaBias()][0], mats["dea_bias"])
    np.testing.assert_array_equal(out[RpIndex(k=2, outside="mask")][0], mats["rp_index"])
    assert out[RpIndex(k=2, outside="mask")].max() == 5  # 2k + 1: outside the local phrase
    punct = is_punctuation(RUNNING_WORDS, RUNNING_UPOS)
    keep = sla_keep_mask(dep_hops(RUNNING_HEADS), 3, True, punct, S2W)
    np.testing.assert_array_equal(out[SlaKeep()][0], keep)
    np.testing.assert_array_equal(out[LisaTarget()][0], lisa_targets(RUNNING_HEADS, S2W))
    np.testing.assert_array_equal(out[PascalCentre()][0], pascal_centres(RUNNING_HEADS, S2W))
    assert out[WordIds()][0].tolist() == [0, 1, 1, 2, 3, 4, 5, 6, 7]  # </s>: a word of its own


def test_padding_uses_each_fill_and_shapes_follow_the_longest_row() -> None:
    short = np.array([0, 1, 2, 3, 4, 5, 6])
    out = build_features([row(), row()], [S2W, short], (SlrBias(), DeaMask(), LisaTarget()))
    assert out[SlrBias()].shape == (2, 9, 9) and out[LisaTarget()].shape == (2, 9)
    assert np.all(out[SlrBias()][1, 7:, :] == 0.0) and np.all(out[SlrBias()][1, :, 7:] == 0.0)
    assert out[DeaMask()][1, 7:, :].all() and out[DeaMask()].dtype == bool
    assert out[LisaTarget()][1, 7:].tolist() == [0, 0]


def test_equal_requests_share_one_array_and_options_make_two() -> None:
    out = build_features([row()], [S2W], (SlrBias(), SlrBias(tau=10.0), SlrBias(tau=1.0)))
    assert len(out) == 2
    assert not np.array_equal(out[SlrBias()], out[SlrBias(tau=1.0)])
    assert hash(RpIndex(k=3)) == hash(RpIndex(k=3)) and RpIndex(k=3) != RpIndex(k=4)


def test_rows_without_syntax_are_neutral_and_missing_parses_are_named() -> None:
    off = row()
    off["has_syntax"] = False
    out = build_features([off], [S2W], (SlrBias(), DeaMask(), LisaTarget(), SlaKeep()))
    assert np.all(out[SlrBias()] == 0) and out[DeaMask()].all() and out[SlaKeep()].all()
    assert np.all(out[LisaTarget()] == -1)  # no LISA loss on such a row
    unparsed = row(heads=False)
    assert np.all(build_features([unparsed], [S2W], [LisaTarget()])[LisaTarget()] == -1)
    with pytest.raises(MissingParse, match="DeaMask"):
        build_features([unparsed], [S2W], [DeaMask()])
    assert build_features([row()], [S2W], []) == {}
