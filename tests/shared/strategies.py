"""Hypothesis strategies: random constituency shapes and dependency trees."""

from __future__ import annotations

from hypothesis import strategies as st

from synattn_shared.syntax.trees import Shape


@st.composite
def shapes(draw: st.DrawFn, max_leaves: int = 14) -> Shape:
    """Random ordered trees (branching 2-4, unary-free) over leaves 0..n-1."""
    n = draw(st.integers(1, max_leaves))
    counter = iter(range(n))

    def build(k: int) -> Shape:
        if k == 1:
            return next(counter)
        parts = draw(st.integers(2, min(4, k)))
        cuts = sorted(
            draw(
                st.lists(
                    st.integers(1, k - 1), min_size=parts - 1, max_size=parts - 1, unique=True
                )
            )
        )
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, k], strict=True)]
        return [build(s) for s in sizes]

    return build(n)


@st.composite
def head_arrays(draw: st.DrawFn, max_len: int = 25, max_roots: int = 1) -> list[int]:
    """Random valid dependency trees as 1-based head arrays (0 = root), possibly non-projective."""
    n = draw(st.integers(1, max_len))
    order = draw(st.permutations(range(1, n + 1)))
    roots = draw(st.integers(1, min(max_roots, n)))
    heads = [0] * (n + 1)
    for i, tok in enumerate(order[roots:], start=roots):
        heads[tok] = order[draw(st.integers(0, i - 1))]  # parent placed earlier: acyclic
    return heads[1:]
