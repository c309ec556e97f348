"""The sentence record: one typed value per sentence, shared by parser, shards and trainer.

Conventions (docs/papers/index.md, "Subwords, </s> and padding"): ``dep_head`` is 1-based with
0 = root (CoNLL-U); ``tree`` is a PTB bracketing over exactly ``words``; ``subword_to_word`` maps
each subword to its word index, -1 for specials and padding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from synattn_shared.errors import SyntaxInputError

if TYPE_CHECKING:  # nltk loads scipy.stats (1-2 s): imported where a tree is built
    import nltk


@dataclass(frozen=True, slots=True)
class SentenceRecord:
    """One sentence with whatever syntax is known about it.

    Attributes:
        sent_id: stable identifier (CoNLL-U ``sent_id``, or the 0-based input index).
        words: the tokens every annotation is over; never re-tokenised downstream.
        pretokenized: True when ``words`` came from the user as given (no tokenizer ran).
        dep_head: 1-based head per word, 0 = root; None when no dependency parse is known.
        dep_rel: relation label per word (not used by any formula).
        upos: universal POS per word (SLA punctuation test, derived-tree labels).
        xpos: language-specific POS per word (derived-tree preterminals).
        tree: labelled constituency bracketing over ``words``; None when unknown.
        subword_to_word: word index per subword, -1 for specials; None before tokenisation.
        line: 1-based line in the source file where the sentence starts, when known.
    """

    sent_id: str
    words: tuple[str, ...]
    pretokenized: bool = True
    dep_head: tuple[int, ...] | None = None
    dep_rel: tuple[str, ...] | None = None
    upos: tuple[str, ...] | None = None
    xpos: tuple[str, ...] | None = None
    tree: str | None = None
    subword_to_word: tuple[int, ...] | None = None
    line: int | None = None

    def __post_init__(self) -> None:
        n = len(self.words)
        if n == 0:
            raise SyntaxInputError(
                "empty sentence (no tokens)", sentence=self.sent_id, line=self.line
            )
        for name in ("dep_head", "dep_rel", "upos", "xpos"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise SyntaxInputError(
                    f"{name} has {len(value)} entries for {n} words",
                    sentence=self.sent_id,
                    line=self.line,
                )
        if self.dep_head is not None:
            bad = [(i + 1, h) for i, h in enumerate(self.dep_head) if not 0 <= h <= n]
            if bad:
                tok, head = bad[0]
                raise SyntaxInputError(
                    f"head {head} of token {tok} ({self.words[tok - 1]!r}) is outside [0, {n}]",
                    sentence=self.sent_id,
                    line=self.line,
                )

    @property
    def n(self) -> int:
        """Number of words."""
        return len(self.words)

    def parsed_tree(self) -> nltk.Tree | None:
        """The constituency tree as an ``nltk.Tree`` (None when unknown)."""
        if self.tree is None:
            return None
        from synattn_shared.syntax.trees import parse_tree

        return parse_tree(self.tree, sentence=self.sent_id, line=self.line or 1)

    def with_subwords(self, subword_to_word: tuple[int, ...]) -> SentenceRecord:
        """Attach a subword map; every word must own at least one subword."""
        covered = {w for w in subword_to_word if w >= 0}
        if covered != set(range(self.n)):
            raise SyntaxInputError(
                f"subword map covers words {sorted(covered)[:8]}... but the sentence has {self.n}",
                sentence=self.sent_id,
                line=self.line,
            )
        return replace(self, subword_to_word=tuple(subword_to_word))
