"""From words to subwords: word maps, matrix expansion, split expansion.

Conventions (docs/papers/index.md, "Subwords, </s> and padding"): the source is
``subwords + </s>``; ``subword_to_word`` is -1 for ``</s>``, BOS and padding. Word matrices expand
by ``X_sub[s, t] = X[word(s), word(t)]``; special rows and columns get a per-feature fill with a
per-feature diagonal. SLR expands the *split vector* instead: inner-word splits are 0, splits next
to a special or padding are ``D_BIG``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from synattn_shared.syntax.slr import D_BIG

PieceScheme = Literal["bpe", "sentencepiece", "wordpiece"]


def word_ids_from_pieces(
    pieces: Sequence[str], scheme: PieceScheme = "bpe", specials: Sequence[str] = ("</s>", "<s>")
) -> list[int]:
    """Rebuild ``subword_to_word`` from the marked pieces of one sentence.

    Args:
        pieces: tokenizer output, e.g. ``["Shar@@", "on"]`` (subword-nmt), ``["▁Shar", "on"]``
            (sentencepiece) or ``["Shar", "##on"]`` (WordPiece).
        scheme: which continuation marker the pieces carry.
        specials: tokens that map to -1.

    Returns:
        Word index per piece, -1 for specials.
    """
    out: list[int] = []
    word = -1
    continues = False  # bpe: the previous piece ended in "@@"
    for p in pieces:
        if p in specials:
            out.append(-1)
            continues = False
            continue
        if scheme == "bpe":
            new = not continues
            continues = p.endswith("@@")
        elif scheme == "sentencepiece":
            new = p.startswith("▁") or word < 0
        else:
            new = not p.startswith("##") or word < 0
        if new:
            word += 1
        out.append(word)
    return out


def check_word_map(subword_to_word: npt.ArrayLike, n_words: int | None = None) -> None:
    """Raise ``ValueError`` unless real pieces are non-decreasing, contiguous words from 0."""
    w = np.asarray(subword_to_word)
    real = w[w >= 0]
    if real.size == 0:
        if n_words:
            raise ValueError(f"subword map has no real piece for {n_words} words")
        return
    steps = np.diff(real)
    if real[0] != 0 or ((steps != 0) & (steps != 1)).any():
        raise ValueError("subword map must be non-decreasing word ids 0, 1, 2, ... without gaps")
    if n_words is not None and int(real[-1]) + 1 != n_words:
        raise ValueError(f"subword map has {int(real[-1]) + 1} words, the parse has {n_words}")


def expand_matrix(
    x: npt.ArrayLike,
    subword_to_word: npt.ArrayLike,
    special_fill: float | int | bool,
    special_diag: float | int | bool,
) -> npt.NDArray[np.generic]:
    """Expand a word matrix to subwords: ``X_sub[s, t] = X[word(s), word(t)]``.

    Args:
        x: word-level matrix ``[n, n]``.
        subword_to_word: ``[T]`` word ids, -1 for specials and padding.
        special_fill: value of special/pad rows and columns (e.g. False for DEA, 255 for hops).
        special_diag: value of a special's own diagonal cell (e.g. True for DEA, 0 for hops).

    Returns:
        ``[T, T]`` of ``x``'s dtype.
    """
    mat = np.asarray(x)
    w = np.asarray(subword_to_word, dtype=np.int64)
    special = w < 0
    idx = np.maximum(w, 0)
    out = mat[idx][:, idx].copy()
    out[special, :] = special_fill
    out[:, special] = special_fill
    sp = np.flatnonzero(special)
    out[sp, sp] = special_diag
    return out


def expand_distances(
    d: npt.ArrayLike, subword_to_word: npt.ArrayLike, d_big: float = D_BIG
) -> npt.NDArray[np.float32]:
    """Split vector at subword level for SLR (docs/papers/gated-slr.md, "SLR at subword level"),
    batched.

    ``d_sub[s] = D_BIG`` when position ``s`` or ``s+1`` is a special or padding; else 0 inside a
    word; else the word-level distance of the boundary ``word(s) | word(s)+1``.

    Args:
        d: word-level distances ``[n-1]`` or ``[B, W-1]`` (padded with anything).
        subword_to_word: ``[T]`` or ``[B, T]`` word ids, -1 for specials and padding.
        d_big: the value for splits next to specials and padding.

    Returns:
        ``float32[T-1]`` or ``float32[B, T-1]``.
    """
    dist = np.asarray(d, dtype=np.float32)
    w = np.asarray(subword_to_word, dtype=np.int64)
    single = w.ndim == 1
    if single:
        dist, w = dist[None, :], w[None, :]
    left, right = w[:, :-1], w[:, 1:]
    near_special = (left < 0) | (right < 0)
    inside = right == left
    if dist.shape[1] == 0:
        boundary = np.zeros(left.shape, np.float32)
    else:
        boundary = np.take_along_axis(dist, np.clip(left, 0, dist.shape[1] - 1), axis=1)
    bad = ~near_special & ~inside & (right != left + 1)
    if bad.any():
        raise ValueError("subword map jumps over a word or goes backwards")
    out = np.where(near_special, np.float32(d_big), np.where(inside, np.float32(0.0), boundary))
    out = out.astype(np.float32)
    return out[0] if single else out
