"""Fixed encoder attention patterns (Raganato et al. 2020; docs/papers/fixed-patterns.md):
pure numpy.

Token-based patterns depend only on the sentence length; word-based ones apply the same rules
to word positions and split each word's mass equally over its pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from synattn_shared.requests import FeatureRequest, Row, WordIds

PATTERN_NAMES = (
    "current", "previous", "next", "left context", "right context",
    "end of sentence", "start of sentence", "last token",
)  # fmt: skip


@lru_cache(maxsize=512)
def _token_patterns(n: int) -> npt.NDArray[np.float64]:
    if n < 1:
        raise ValueError("a sentence has at least one token")
    last = n - 1
    p = np.zeros((8, n, n))
    j = np.arange(n)
    for i in range(n):
        p[0, i, i] = 1.0
        p[1, i, i - 1 if i > 0 else i] = 1.0
        p[2, i, i + 1 if i < last else i] = 1.0
        if i >= 2:  # left context 0..i-2, weights (j+1)^3
            w = (j[: i - 1] + 1.0) ** 3
            p[3, i, : i - 1] = w / w.sum()
        else:
            p[3, i, i] = 1.0
        if i <= last - 2:  # right context i+2..N, mirrored weights (N-j+1)^3
            w = (last - j[i + 2 :] + 1.0) ** 3
            p[4, i, i + 2 :] = w / w.sum()
        else:
            p[4, i, i] = 1.0
    w6 = (j + 1.0) ** 3
    p[5] = w6 / w6.sum()
    w7 = (last - j + 1.0) ** 3
    p[6] = w7 / w7.sum()
    p[7, :, last] = 1.0
    p.setflags(write=False)
    return p


def token_patterns(n: int) -> npt.NDArray[np.float64]:
    """The eight token-based patterns ``[8, n, n]`` (rows = queries) of an ``n``-token sentence."""
    return _token_patterns(n)


def word_patterns(word_ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The eight word-based patterns ``[8, T, T]`` for tokens with these (contiguous) word ids:
    ``P[t, s] = B[w_t, w_s] / c_{w_s}``."""
    return np.stack([word_pattern(word_ids, i) for i in range(len(PATTERN_NAMES))])


def word_pattern(word_ids: npt.ArrayLike, index: int) -> npt.NDArray[np.float64]:
    """Pattern ``index`` of ``word_patterns`` alone (``[T, T]``): what one fixed head reads."""
    w = np.asarray(word_ids, dtype=np.int64)
    n_words = int(w.max()) + 1
    counts = np.bincount(w, minlength=n_words).astype(np.float64)
    b: npt.NDArray[np.float64] = token_patterns(n_words)[index][np.ix_(w, w)]
    return b / counts[w][None, :]


@dataclass(frozen=True)
class FixedPattern(FeatureRequest):
    """Fixed pattern ``index`` (0-based, ``PATTERN_NAMES``) over a sentence's subwords, token-
    or word-based, float32, 0 at padding. Built on the host with the batch, so the fixed heads'
    forward reads a device tensor instead of stopping to fetch the sentence lengths (a
    host-device synchronisation on a GPU, and a graph break under ``torch.compile``)."""

    index: int
    word_based: bool = False
    fill: ClassVar[float] = 0.0

    def build(self, row: Row, s2w: np.ndarray) -> np.ndarray:
        if self.word_based:
            p = word_pattern(WordIds().build(row, s2w), self.index)
        else:
            p = token_patterns(len(s2w))[self.index]
        return p.astype(np.float32)
