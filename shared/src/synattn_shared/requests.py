"""Typed requests for the syntax features a model reads per batch, and the one builder.

A variant declares what it needs as small frozen values: ``SlrBias(tau=10.0)``, ``DeaMask()``,
``RpIndex(k=6)``. The trainer collects them from every variant of a model, ``build_features``
makes each once per batch, at subword level, padded by the request's own rule, and a variant
reads its array back with the same value as the key. Two variants asking for the same thing
share one array; two asking for different temperatures get two. Nothing travels as a string,
and each default is written once (``synattn_shared.defaults``).

Subword expansion follows each feature's rule (docs/papers/index.md, "Subwords, </s> and
padding"; ``materialise`` and ``syntax.targets`` hold the rules); ``</s>`` and other specials
are ``-1`` in the subword-to-word map. Rows without syntax (``has_syntax`` False) give neutral
values: zero biases, all-True masks, no LISA target.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from synattn_shared.defaults import LP_OUTSIDE, RP_CLIP, SLA_M, SLR_BINARIZE, SLR_TAU, SLR_TIES
from synattn_shared.materialise import MaterialiseOptions, materialise
from synattn_shared.syntax.dependency import dep_hops
from synattn_shared.syntax.distance import Binarize
from synattn_shared.syntax.phrase import LpOutside
from synattn_shared.syntax.slr import SlrTies
from synattn_shared.syntax.targets import (
    is_punctuation,
    lisa_targets,
    pascal_centres,
    sla_keep_mask,
)

Row = dict[str, Any]


class MissingParse(ValueError):
    """A request needs a dependency parse the row does not have."""


@dataclass(frozen=True)
class FeatureRequest:
    """One feature of a batch: ``[B, T, T]`` (or ``[B, T]`` when ``vector``) at subword level.

    Class attributes:
        fill: the value at padded positions (masked anyway by key padding; keeps values finite).
        vector: one value per subword instead of one per pair.
    """

    fill: ClassVar[float | int | bool] = 0
    vector: ClassVar[bool] = False

    def materialised(self) -> tuple[str, MaterialiseOptions] | None:
        """The ``materialise`` feature and options this request is, if it is one of those
        (they are built together per row, sharing intermediate results)."""
        return None

    def build(self, row: Row, s2w: np.ndarray) -> np.ndarray:
        """The feature of one row, ``[T, T]`` or ``[T]`` for ``T = len(s2w)`` subwords."""
        raise NotImplementedError


@dataclass(frozen=True)
class SlrBias(FeatureRequest):
    """Soft SLR log-mask ``log m`` (docs/papers/gated-slr.md, "Syntactic local range"): the bias
    of gated, averaged and pure SLR attention."""

    tau: float = SLR_TAU
    binarize: Binarize = SLR_BINARIZE
    ties: SlrTies = SLR_TIES
    fill: ClassVar[float] = 0.0

    def materialised(self) -> tuple[str, MaterialiseOptions]:
        opts = MaterialiseOptions(tau=self.tau, slr_binarize=self.binarize, slr_ties=self.ties)
        return "slr_bias", opts


@dataclass(frozen=True)
class DeaMask(FeatureRequest):
    """True where the key is the query itself, its head or a dependent (docs/papers/rhe-sea.md,
    "DEA")."""

    fill: ClassVar[bool] = True

    def materialised(self) -> tuple[str, MaterialiseOptions]:
        return "dea_mask", MaterialiseOptions()


@dataclass(frozen=True)
class DeaBias(FeatureRequest):
    """The dependency mask as a bias: 0 where ``DeaMask`` is True, ``-inf`` elsewhere."""

    fill: ClassVar[float] = 0.0

    def materialised(self) -> tuple[str, MaterialiseOptions]:
        return "dea_bias", MaterialiseOptions()


@dataclass(frozen=True)
class RpIndex(FeatureRequest):
    """LPEA's embedding index ``clip(RP, k) + k`` (eq. 7), ``2k + 1`` for keys outside the
    local phrase unless ``outside`` is ``clip`` (docs/papers/rhe-sea.md, "LPEA")."""

    k: int = RP_CLIP
    outside: LpOutside = LP_OUTSIDE
    fill: ClassVar[int] = 0

    def materialised(self) -> tuple[str, MaterialiseOptions]:
        return "rp_index", MaterialiseOptions(rp_clip=self.k, lp_outside=self.outside)


@dataclass(frozen=True)
class SlaKeep(FeatureRequest):
    """SLA's local keep-mask: keys within ``m`` dependency hops of the query or its neighbours
    (docs/papers/index.md, "SLA"); punctuation keys visible when ``punct_visible``."""

    m: int = SLA_M
    neighbour_union: bool = True
    punct_visible: bool = True
    fill: ClassVar[bool] = True

    def build(self, row: Row, s2w: np.ndarray) -> np.ndarray:
        heads = _heads(row, self)
        punct = is_punctuation(row["words"], row.get("upos")) if self.punct_visible else None
        keep = sla_keep_mask(dep_hops(heads), self.m, self.neighbour_union, punct, s2w)
        return keep if row["has_syntax"] else np.ones_like(keep)


@dataclass(frozen=True)
class LisaTarget(FeatureRequest):
    """LISA's target per subword: the first piece of the parent word (docs/papers/index.md,
    "LISA"); -1 on every
    position of a row without syntax (no loss there)."""

    vector: ClassVar[bool] = True
    fill: ClassVar[int] = 0

    def build(self, row: Row, s2w: np.ndarray) -> np.ndarray:
        if row.get("dep_head") is None or not row["has_syntax"]:
            return np.full(len(s2w), -1, dtype=np.int64)
        return lisa_targets(row["dep_head"], s2w)


@dataclass(frozen=True)
class PascalCentre(FeatureRequest):
    """PASCAL's Gaussian centre per subword: the mean position of the parent's pieces
    (docs/papers/index.md, "PASCAL")."""

    vector: ClassVar[bool] = True
    fill: ClassVar[float] = 0.0

    def build(self, row: Row, s2w: np.ndarray) -> np.ndarray:
        return pascal_centres(_heads(row, self), s2w)


@dataclass(frozen=True)
class WordIds(FeatureRequest):
    """The word each subword belongs to; each special (``</s>``) is a word of its own
    (word-based fixed patterns, Raganato et al. 2020)."""

    vector: ClassVar[bool] = True
    fill: ClassVar[int] = 0

    def build(self, row: Row, s2w: np.ndarray) -> np.ndarray:
        special = s2w < 0
        return np.where(special, s2w.max(initial=-1) + np.cumsum(special), s2w)


def _heads(row: Row, request: FeatureRequest) -> Any:
    heads = row.get("dep_head")
    if heads is None:
        raise MissingParse(f"{request} needs a dependency parse")
    return heads


def build_row(
    row: Row, s2w: np.ndarray, requests: Sequence[FeatureRequest]
) -> dict[FeatureRequest, np.ndarray]:
    """Every request of one row, unpadded (``materialise`` once per set of options).

    Raises:
        MissingParse: a dependency feature of a row parsed without dependencies.
    """
    groups: dict[MaterialiseOptions, list[tuple[str, FeatureRequest]]] = defaultdict(list)
    out: dict[FeatureRequest, np.ndarray] = {}
    for req in requests:
        spec = req.materialised()
        if spec is None:
            out[req] = req.build(row, s2w)
        else:
            groups[spec[1]].append((spec[0], req))
    for opts, members in groups.items():
        mats = materialise(row, tuple(name for name, _ in members), opts, s2w.tolist())
        for name, req in members:
            m = mats[name]
            if m is None:
                raise MissingParse(f"{req} needs a dependency parse")
            out[req] = m
    t = len(s2w)
    for req, m in out.items():
        if m.shape != ((t,) if req.vector else (t, t)):
            raise ValueError(f"{req} has shape {m.shape} for {t} subwords")
    return out


def build_features(
    rows: Sequence[Row], s2ws: Sequence[np.ndarray], requests: Iterable[FeatureRequest]
) -> dict[FeatureRequest, np.ndarray]:
    """The batch array of each request: rows padded on the right to the longest row's
    subwords with the request's ``fill``.

    Args:
        rows: shard rows (``words``, ``dep_head``, ``upos``, ``syn_dist``, ``const_layer``,
            ``has_syntax``).
        s2ws: each row's ``[T_b]`` subword-to-word map (-1 for specials such as ``</s>``).
        requests: what to build; duplicates are built once.

    Raises:
        MissingParse: a dependency feature of a row parsed without dependencies.
    """
    wanted = tuple(dict.fromkeys(requests))
    if not wanted or not rows:
        return {}
    width = max(len(w) for w in s2ws)
    built = [
        build_row(row, np.asarray(w, np.int64), wanted) for row, w in zip(rows, s2ws, strict=True)
    ]
    out: dict[FeatureRequest, np.ndarray] = {}
    for req in wanted:
        first = built[0][req]
        shape = (len(rows), width) if req.vector else (len(rows), width, width)
        padded = np.full(shape, req.fill, dtype=first.dtype)
        for b, mats in enumerate(built):
            m = mats[req]
            if req.vector:
                padded[b, : m.shape[0]] = m
            else:
                padded[b, : m.shape[0], : m.shape[1]] = m
        out[req] = padded
    return out
