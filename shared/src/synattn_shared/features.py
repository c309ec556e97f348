"""Per-sentence shard rows: the O(n) syntax columns every attention feature derives from.

``to_row`` is pure (record in, dict out, no I/O). Dense matrices are never stored; see
``synattn_shared.materialise`` for the reader-side derivations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from synattn_shared.errors import SyntaxInputError
from synattn_shared.records import SentenceRecord
from synattn_shared.syntax.derived import Scheme, derive_tree, flat_features, flat_features_batch
from synattn_shared.syntax.distance import shape_distances
from synattn_shared.syntax.trees import bracket, collapse, leaf_depths

if TYPE_CHECKING:  # nltk loads scipy.stats (1-2 s): imported where a tree is built
    import nltk

Constituency = Literal["auto", "given", "derived"]


class FeatureOptions(BaseModel):
    """How constituency features are obtained; recorded in every manifest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    constituency: Constituency = "auto"  # auto: the given tree when present, else derived
    derived_scheme: Scheme = "flat"
    store_tree: Literal["given", "always", "never"] = "given"  # derived trees are re-derivable


def _tree_features(tree: nltk.Tree) -> tuple[np.ndarray, np.ndarray]:
    dist = shape_distances(collapse(tree))
    layers = np.asarray(leaf_depths(tree), dtype=np.int16)
    return dist, layers


def to_row(
    record: SentenceRecord,
    options: FeatureOptions | None = None,
    flat: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """The shard row of one sentence.

    Columns: identity (``sent_id``, ``line``, ``words``, ``pretokenized``), the parse
    (``dep_head``, ``dep_rel``, ``upos``, ``xpos``), and the constituency features ``syn_dist``
    (flat distances, offset form) and ``const_layer`` (word depths in T), ``tree`` (optional) and
    ``has_syntax`` (False: every syntactic bias of the sentence is zero).

    Args:
        record: the sentence.
        options: how constituency features are obtained.
        flat: precomputed ``flat_features`` of the record's heads (from ``to_rows``).

    Raises:
        SyntaxInputError: invalid heads (range, cycle), naming the sentence.
    """
    opts = options or FeatureOptions()
    n = record.n
    dist: np.ndarray | None = None
    layers: np.ndarray | None = None
    tree_text: str | None = None
    use_given = record.tree is not None and opts.constituency in ("auto", "given")
    try:
        if use_given:
            tree = record.parsed_tree()
            assert tree is not None
            if tuple(tree.leaves()) == record.words:
                dist, layers = _tree_features(tree)
            if opts.store_tree != "never":
                tree_text = record.tree
        elif record.dep_head is not None and opts.constituency != "given":
            if opts.derived_scheme == "flat" and opts.store_tree != "always":
                dist, layers = flat if flat is not None else flat_features(record.dep_head)
            else:
                tree = derive_tree(
                    record.words, record.dep_head, record.upos, record.xpos, opts.derived_scheme
                )
                dist, layers = _tree_features(tree)
                if opts.store_tree == "always":
                    tree_text = bracket(tree)
    except ValueError as exc:
        raise SyntaxInputError(str(exc), sentence=record.sent_id, line=record.line) from exc
    has_syntax = dist is not None
    return {
        "sent_id": record.sent_id,
        "line": record.line,
        "words": list(record.words),
        "pretokenized": record.pretokenized,
        "dep_head": None if record.dep_head is None else list(record.dep_head),
        "dep_rel": None if record.dep_rel is None else list(record.dep_rel),
        "upos": None if record.upos is None else list(record.upos),
        "xpos": None if record.xpos is None else list(record.xpos),
        "syn_dist": dist.tolist() if dist is not None else [0] * (n - 1),
        "const_layer": layers.tolist() if layers is not None else [0] * n,
        "tree": tree_text,
        "has_syntax": has_syntax,
    }


def _uses_flat_path(record: SentenceRecord, opts: FeatureOptions) -> bool:
    given = record.tree is not None and opts.constituency in ("auto", "given")
    return (
        not given
        and record.dep_head is not None
        and opts.constituency != "given"
        and opts.derived_scheme == "flat"
        and opts.store_tree != "always"
    )


def to_rows(
    records: Sequence[SentenceRecord], options: FeatureOptions | None = None
) -> list[dict[str, Any]]:
    """``to_row`` for many records; the derived flat features are computed in one vectorised pass.

    Raises:
        SyntaxInputError: the first record (in order) with invalid heads.
    """
    opts = options or FeatureOptions()
    flat_idx = [k for k, r in enumerate(records) if _uses_flat_path(r, opts)]
    flat: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    try:
        computed = flat_features_batch([records[k].dep_head for k in flat_idx])  # type: ignore[misc]
        flat = dict(zip(flat_idx, computed, strict=True))
    except ValueError:
        pass  # fall through: to_row raises the located error for the first bad record
    return [to_row(r, opts, flat.get(k)) for k, r in enumerate(records)]


def row_to_record(row: dict[str, Any]) -> SentenceRecord:
    """The record a shard row was made from (syntax columns are recomputed, not read back)."""

    def tup(v: Any) -> tuple[Any, ...] | None:
        return None if v is None else tuple(v)

    return SentenceRecord(
        sent_id=row["sent_id"],
        words=tuple(row["words"]),
        pretokenized=bool(row["pretokenized"]),
        dep_head=tup(row.get("dep_head")),
        dep_rel=tup(row.get("dep_rel")),
        upos=tup(row.get("upos")),
        xpos=tup(row.get("xpos")),
        tree=row.get("tree"),
        line=row.get("line"),
    )
