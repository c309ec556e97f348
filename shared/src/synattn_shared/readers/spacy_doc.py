"""A ``SentenceRecord`` from a parsed spaCy ``Doc`` (or ``Span``)."""

from __future__ import annotations

from typing import Any

from synattn_shared.records import SentenceRecord


def record_from_doc(
    doc: Any, sent_id: str, *, pretokenized: bool = False, tree: str | None = None
) -> SentenceRecord:
    """Build the record of one parsed line.

    Several sentences in the ``Doc`` stay one record with several roots, not linked to each
    other (docs/papers/gated-slr.md, "Decisions").

    Args:
        doc: a spaCy ``Doc`` or ``Span`` with a dependency parse.
        sent_id: identifier to store.
        pretokenized: whether the ``Doc`` was built from given words (no tokenizer ran).
        tree: an optional constituency bracketing over the same tokens (benepar, stanza).

    Returns:
        The ``SentenceRecord`` (heads 1-based relative to the first token, 0 = root).
    """
    tokens = list(doc)
    start = tokens[0].i if tokens else 0
    heads = tuple(0 if t.head.i == t.i else t.head.i - start + 1 for t in tokens)
    return SentenceRecord(
        sent_id=sent_id,
        words=tuple(t.text for t in tokens),
        pretokenized=pretokenized,
        dep_head=heads,
        dep_rel=tuple(t.dep_ or "dep" for t in tokens),
        upos=tuple(t.pos_ or "X" for t in tokens),
        xpos=tuple(t.tag_ or t.pos_ or "X" for t in tokens),
        tree=tree,
    )
