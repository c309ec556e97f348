"""Per-subword syntax targets and position indices for the baselines
(docs/papers/index.md, "Baselines").

Pure numpy builders used by ``collate``: Shaw relative-position indices, LISA parent targets,
PASCAL parent centres, the SLA local keep-mask. Positions are subword positions in the
right-padded row; ``subword_to_word`` is -1 for ``</s>``, BOS and padding.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from synattn_shared.defaults import SLA_M
from synattn_shared.syntax.dependency import validate_heads
from synattn_shared.syntax.subword import expand_matrix


def shaw_index(T: int, k: int) -> npt.NDArray[np.int64]:
    """Shaw et al. relative-position index ``clip(j - i, k) + k``, ``[T, T]``."""
    pos = np.arange(T)
    index: npt.NDArray[np.int64] = np.clip(pos[None, :] - pos[:, None], -k, k) + k
    return index


def _first_and_mean_piece(w: npt.NDArray[np.int64], n: int) -> tuple[np.ndarray, np.ndarray]:
    pos = np.arange(w.shape[0])
    real = w >= 0
    first = np.full(n, -1, np.int64)
    # reversed assignment leaves the smallest position per word
    first[w[real][::-1]] = pos[real][::-1]
    mean = np.bincount(w[real], weights=pos[real], minlength=n) / np.bincount(w[real], minlength=n)
    return first, mean


def lisa_targets(heads: npt.ArrayLike, subword_to_word: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """LISA target per subword: first piece of the parent word; root and specials: itself
    (every piece of the root word points to the root's first piece)."""
    parent = validate_heads(heads)
    w = np.asarray(subword_to_word, dtype=np.int64)
    first, _ = _first_and_mean_piece(w, parent.shape[0])
    wi = np.maximum(w, 0)
    target_word = np.where(parent[wi] >= 0, parent[wi], wi)
    return np.where(w >= 0, first[target_word], np.arange(w.shape[0]))


def pascal_centres(
    heads: npt.ArrayLike, subword_to_word: npt.ArrayLike
) -> npt.NDArray[np.float32]:
    """PASCAL centre per subword: mean position of the parent word's pieces; the root word
    uses its own pieces; specials are centred on themselves."""
    parent = validate_heads(heads)
    w = np.asarray(subword_to_word, dtype=np.int64)
    _, mean = _first_and_mean_piece(w, parent.shape[0])
    wi = np.maximum(w, 0)
    target_word = np.where(parent[wi] >= 0, parent[wi], wi)
    return np.where(w >= 0, mean[target_word], np.arange(w.shape[0])).astype(np.float32)


def sla_keep_mask(
    hops: npt.ArrayLike,
    m: int = SLA_M,
    neighbour_union: bool = True,
    is_punct: Sequence[bool] | None = None,
    subword_to_word: npt.ArrayLike | None = None,
) -> npt.NDArray[np.bool_]:
    """SLA local keep-mask (Li et al. 2021), word level, optionally expanded to subwords.

    ``keep(i) = N_m(i) | N_m(i-1) | N_m(i+1)`` over words with ``N_m(i) = {j : hops[i, j] <= m}``;
    punctuation keys (``is_punct``) and special keys are visible; special query rows keep all.
    """
    near = np.asarray(hops) <= m
    keep = near.copy()
    if neighbour_union and near.shape[0] > 1:
        keep[1:] |= near[:-1]
        keep[:-1] |= near[1:]
    if is_punct is not None:
        keep[:, np.asarray(is_punct, dtype=bool)] = True
    if subword_to_word is None:
        return keep
    w = np.asarray(subword_to_word, dtype=np.int64)
    out: npt.NDArray[np.bool_] = np.asarray(expand_matrix(keep, w, False, True), dtype=bool)
    out[:, w < 0] = True
    out[w < 0, :] = True
    return out


def is_punctuation(words: Sequence[str], upos: Sequence[str] | None = None) -> list[bool]:
    """Punctuation test of SLA: UPOS ``PUNCT``, else "every character is punctuation"."""
    if upos is not None:
        return [u == "PUNCT" for u in upos]
    return [all(unicodedata.category(c).startswith("P") for c in w) for w in words]
