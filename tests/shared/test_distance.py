"""Distances, binarised distances and both inverses on the running example
(docs/papers/gated-slr.md, "Syntactic distance")."""

import numpy as np

from synattn_shared.syntax.distance import (
    binarized_distances,
    distances_to_shape,
    shape_distances,
)
from synattn_shared.syntax.trees import collapse, leaf_depths, normalise_tree


def test_flat_distances_of_running_example(running_tree):
    assert shape_distances(collapse(running_tree)).tolist() == [3, 2, 1, 2, 1, 3]


def test_right_binarised_distances(running_tree):
    assert shape_distances(collapse(running_tree), "right").tolist() == [5, 3, 1, 2, 1, 4]
    assert binarized_distances([3, 2, 1, 2, 1, 3]).tolist() == [5, 3, 1, 2, 1, 4]


def test_collapsed_tree_shape(running_tree):
    assert collapse(running_tree) == [0, [1, [2, 3], [4, 5]], 6]


def test_inverse_merges_ties():
    assert distances_to_shape([3, 2, 1, 2, 1, 3]) == [0, [1, [2, 3], [4, 5]], 6]


def test_shen_first_argmax_inverse():
    assert distances_to_shape([3, 2, 1, 2, 1, 3], "first") == [0, [[1, [[2, 3], [4, 5]]], 6]]


def test_gated_slr_example_gives_equal_values_under_s():
    import nltk

    tree = nltk.Tree.fromstring("(S (NP (PRP I)) (VP (VBP like) (NP (NNS apples))) (. .))")
    d = shape_distances(collapse(tree))
    assert d.tolist() == [2, 1, 2]
    assert d[0] == d[2]


def test_single_word():
    import nltk

    tree = nltk.Tree.fromstring("(S (NN Yes))")
    assert shape_distances(collapse(tree)).tolist() == []
    assert distances_to_shape(np.zeros(0)) == 0


def test_layers_of_running_example(running_tree):
    # LPEA's layers: Bush 3, held 3, a 4, talk 4, with 4, Sharon 5, . 2
    assert leaf_depths(running_tree) == [3, 3, 4, 4, 4, 5, 2]
    wrapped = normalise_tree(__import__("nltk").Tree("TOP", [running_tree]))
    assert leaf_depths(wrapped) == [3, 3, 4, 4, 4, 5, 2]
