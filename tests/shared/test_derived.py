"""Constituency derived from dependencies, and lifting (docs/papers/index.md, "Constituency
trees derived from dependencies")."""

import numpy as np
import pytest

from synattn_shared.syntax.derived import derive_tree, flat_features, projectivise
from synattn_shared.syntax.distance import shape_distances
from synattn_shared.syntax.trees import bracket, collapse, leaf_depths
from tests.conftest import RUNNING_HEADS, RUNNING_UPOS, RUNNING_WORDS, RUNNING_XPOS

HEARING = ["A", "hearing", "is", "scheduled", "on", "the", "issue", "today", "."]
HEARING_HEADS0 = [1, 3, 3, -1, 1, 6, 4, 3, 3]


def one_based(heads0):
    return [h + 1 for h in heads0]


@pytest.mark.parametrize(
    ("scheme", "shape", "d"),
    [
        ("flat", [0, 1, [2, 3], [4, 5], 6], [2, 2, 1, 2, 1, 2]),
        ("two_level", [0, [1, [2, 3], [4, 5], 6]], [3, 2, 1, 2, 1, 2]),
        ("binary", [0, [[[1, [2, 3]], [4, 5]], 6]], [5, 2, 1, 3, 1, 4]),
    ],
)
def test_derived_schemes_on_running_example(scheme, shape, d):
    tree = derive_tree(RUNNING_WORDS, RUNNING_HEADS, RUNNING_UPOS, RUNNING_XPOS, scheme)
    assert tree.leaves() == list(RUNNING_WORDS)
    assert collapse(tree) == shape
    assert shape_distances(collapse(tree)).tolist() == d


def test_flat_labels_and_layers():
    tree = derive_tree(RUNNING_WORDS, RUNNING_HEADS, RUNNING_UPOS, RUNNING_XPOS, "flat")
    assert bracket(tree) == (
        "(S (NNP Bush) (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NNP Sharon)) (. .))"
    )
    assert leaf_depths(tree) == [2, 2, 3, 3, 3, 3, 2]


def test_flat_fast_path_matches_tree():
    d, layers = flat_features(RUNNING_HEADS)
    assert d.tolist() == [2, 2, 1, 2, 1, 2]
    assert layers.tolist() == [2, 2, 3, 3, 3, 3, 2]


def test_nonprojective_lift():
    assert projectivise(one_based(HEARING_HEADS0)).tolist() == [1, 3, 3, -1, 3, 6, 4, 3, 3]
    flat = derive_tree(HEARING, one_based(HEARING_HEADS0), scheme="flat")
    assert flat.leaves() == HEARING
    assert collapse(flat) == [[0, 1], 2, 3, [4, [5, 6]], 7, 8]
    assert shape_distances(collapse(flat)).tolist() == [1, 3, 3, 3, 2, 1, 3, 3]
    two = derive_tree(HEARING, one_based(HEARING_HEADS0), scheme="two_level")
    assert shape_distances(collapse(two)).tolist() == [1, 4, 4, 3, 2, 1, 3, 3]
    assert flat_features(one_based(HEARING_HEADS0))[0].tolist() == [1, 3, 3, 3, 2, 1, 3, 3]


def test_lift_can_move_an_originally_projective_arc():
    # an arc projective in the input can still be lifted after an earlier lift:
    # 0-based [2, -1, 1, 0, 2] lifts to [1, -1, 1, 1, 1]
    assert projectivise(one_based([2, -1, 1, 0, 2])).tolist() == [1, -1, 1, 1, 1]


def test_projective_input_is_unchanged():
    heads0 = np.array(RUNNING_HEADS) - 1
    assert projectivise(RUNNING_HEADS).tolist() == heads0.tolist()


def test_multi_root_gets_virtual_root():
    words = ["It", "rains", ".", "Stay", "home", "."]
    heads = [2, 0, 2, 0, 4, 4]
    tree = derive_tree(words, heads, scheme="flat")
    assert tree.label() == "ROOT"
    assert collapse(tree) == [[0, 1, 2], [3, 4, 5]]
    d, layers = flat_features(heads)
    assert d.tolist() == [1, 1, 2, 1, 1]
    assert layers.tolist() == leaf_depths(tree)


def test_cycle_is_rejected():
    with pytest.raises(ValueError, match="cycle"):
        derive_tree(["a", "b", "c"], [2, 3, 1])
