"""Constituency tree normalisation and unlabelled tree shapes
(docs/papers/gated-slr.md, "Syntactic distance"; docs/papers/rhe-sea.md, "LPEA").

A *shape* is an ordered unlabelled tree whose leaves are word indices: an ``int`` is a leaf, a
``list`` an internal node. ``collapse`` gives the collapsed tree C(T) as a shape.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeAlias

from synattn_shared.errors import SyntaxInputError

if TYPE_CHECKING:  # nltk loads scipy.stats (1-2 s): imported where a tree is built
    import nltk

# Tree walks recurse once per level; a 500-word right-branching parse is ~1000 levels deep with
# preterminals. Python 3.11 runs Python-to-Python calls without growing the C stack, so a higher
# limit is safe.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))

Shape: TypeAlias = "int | list[Shape]"

WRAPPER_LABELS = frozenset({"", "TOP", "ROOT"})
EMPTY_ELEMENT = "-NONE-"
PTB_UNESCAPE = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
}


def _prune_empty(tree: nltk.Tree) -> nltk.Tree | None:
    """Drop ``-NONE-`` preterminals and constituents left without words."""
    from nltk import Tree

    def prune(node: nltk.Tree) -> nltk.Tree | None:
        if node.label() == EMPTY_ELEMENT:
            return None
        children: list[nltk.Tree | str] = []
        for child in node:
            if isinstance(child, Tree):
                kept = prune(child)
                if kept is not None:
                    children.append(kept)
            else:
                children.append(child)
        return Tree(node.label(), children) if children else None

    return prune(tree)


def normalise_tree(tree: nltk.Tree, unescape: bool = True) -> nltk.Tree:
    """Normalise a treebank tree: unwrap TOP/ROOT, remove empty elements.

    Args:
        tree: a labelled tree as read from a treebank or a parser.
        unescape: map PTB bracket escapes (``-LRB-`` ...) back to the characters they stand for.

    Returns:
        The normalised tree T. Labels are kept (for display); no formula reads them.

    Raises:
        ValueError: when nothing but empty elements remains.
    """
    from nltk import Tree

    pruned = _prune_empty(tree)
    if pruned is None:
        raise ValueError("tree has no words after removing empty elements")
    while (
        isinstance(pruned, Tree)
        and len(pruned) == 1
        and isinstance(pruned[0], Tree)
        and pruned.label() in WRAPPER_LABELS
    ):
        pruned = pruned[0]
    if unescape:
        for pos in pruned.treepositions("leaves"):
            leaf = pruned[pos]
            if leaf in PTB_UNESCAPE:
                pruned[pos] = PTB_UNESCAPE[leaf]
    return pruned


def leaf_depths(tree: nltk.Tree) -> list[int]:
    """Edges from the root of T to each word: LPEA's ``layer`` (POS, unary levels count)."""
    from nltk import Tree

    if not isinstance(tree, Tree):
        return [0]
    return [len(pos) for pos in tree.treepositions("leaves")]


def collapse(tree: nltk.Tree | str) -> Shape:
    """The collapsed tree C(T): every node with one child is replaced by that child."""
    from nltk import Tree

    counter = iter(range(1 << 30))

    def walk(node: nltk.Tree | str) -> Shape:
        if not isinstance(node, Tree):
            return next(counter)
        kids = [walk(child) for child in node]
        return kids[0] if len(kids) == 1 else kids

    return walk(tree)


def shape_leaves(shape: Shape) -> list[int]:
    """Leaves of a shape, left to right."""
    if isinstance(shape, int):
        return [shape]
    out: list[int] = []
    for child in shape:
        out.extend(shape_leaves(child))
    return out


def canonical_shape(shape: Shape) -> Shape:
    """Remove unary nodes from a shape (the collapse on an unlabelled tree)."""
    if isinstance(shape, int):
        return shape
    kids = [canonical_shape(c) for c in shape]
    return kids[0] if len(kids) == 1 else kids


def binarize_right(shape: Shape) -> Shape:
    """Right-factor every n-ary node: X(c1, c2, ..., ck) -> X(c1, X'(c2, ..., ck))."""
    if isinstance(shape, int):
        return shape
    kids = [binarize_right(c) for c in shape]
    while len(kids) > 2:
        kids = [*kids[:-2], [kids[-2], kids[-1]]]
    return kids


def shape_to_tree(shape: Shape, words: list[str] | tuple[str, ...], label: str = "X") -> nltk.Tree:
    """Label a shape with a constant label and the given words (for display and round trips)."""
    from nltk import Tree

    def build(node: Shape) -> nltk.Tree:
        if isinstance(node, int):
            return Tree(label, [words[node]])
        return Tree(label, [build(c) for c in node])

    return build(shape)


PTB_ESCAPE = {v: k for k, v in PTB_UNESCAPE.items() if v in "()"}


def bracket(tree: nltk.Tree) -> str:
    """One-line PTB bracketing; ``(`` and ``)`` leaves are escaped so the text parses back."""
    out = tree.copy(deep=True)
    for pos in out.treepositions("leaves"):
        if out[pos] in PTB_ESCAPE:
            out[pos] = PTB_ESCAPE[out[pos]]
    return str(out.pformat(margin=1 << 30))


# nltk refuses trees deeper than 500 by default; real right-branching 500-word parses get there.
MAX_TREE_DEPTH = 2000


def parse_tree(
    text: str, *, source: str = "<string>", line: int = 1, sentence: int | str = 1
) -> nltk.Tree:
    """Parse and normalise one bracketed tree, with a located error on failure."""
    import nltk
    import nltk.tree.tree as nltk_tree

    nltk_tree.MAX_TREE_DEPTH = max(nltk_tree.MAX_TREE_DEPTH, MAX_TREE_DEPTH)
    try:
        tree = nltk.Tree.fromstring(text, remove_empty_top_bracketing=False)
    except ValueError as exc:
        raise SyntaxInputError(
            f"malformed tree: {exc}", source=source, line=line, sentence=sentence
        ) from exc
    if not isinstance(tree, nltk.Tree) or not tree.leaves():
        raise SyntaxInputError(
            "empty tree (no words)", source=source, line=line, sentence=sentence
        )
    try:
        return normalise_tree(tree)
    except ValueError as exc:
        raise SyntaxInputError(str(exc), source=source, line=line, sentence=sentence) from exc
