"""The parser interface every backend implements, and the helpers they share."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from synattn_shared.errors import SyntaxInputError
from synattn_shared.manifest import ParserInfo
from synattn_shared.readers.ptb import parse_tree
from synattn_shared.records import SentenceRecord
from synattn_shared.syntax.trees import bracket, normalise_tree

if TYPE_CHECKING:  # nltk loads scipy.stats (1-2 s): imported where a tree is built
    import nltk

SentenceInput = str | Sequence[str]  # raw text, or pretokenised words
_SPACE = re.compile(r"\s+")


class BackendUnavailable(RuntimeError):
    """A backend whose package or model is not installed; the message says how to install it."""


class Parser(Protocol):
    """A loaded parser: sentences in, ``SentenceRecord``s out (one per input, order kept).

    ``parse`` may raise for the whole batch; ``parse_isolated`` then finds the bad sentence.
    Pretokenised input (a list of words) is never re-tokenised: the record has exactly those words.
    """

    info: ParserInfo

    def parse(self, items: Sequence[SentenceInput], ids: Sequence[str]) -> list[SentenceRecord]:
        """Parse a batch."""
        ...


def normalise_text(text: str) -> str:
    """Raw text as the tokenizer should see it: whitespace runs become one space, ends stripped.

    spaCy turns extra whitespace into whitespace tokens, which would become words with heads.
    """
    return _SPACE.sub(" ", text).strip()


def check_input(item: SentenceInput, max_chars: int | None = None) -> str | None:
    """Why a sentence cannot be parsed (None when it can)."""
    if isinstance(item, str):
        if not normalise_text(item):
            return "empty sentence"
        if max_chars is not None and len(item) > max_chars:
            return f"{len(item)} characters, the limit is {max_chars}"
        return None
    if len(item) == 0:
        return "empty token list"
    for k, word in enumerate(item):
        if not isinstance(word, str) or not word.strip() or word != word.strip():
            return f"token {k + 1} ({word!r}) is empty or has leading/trailing whitespace"
    return None


def parse_isolated(
    parser: Parser, items: Sequence[SentenceInput], ids: Sequence[str]
) -> list[SentenceRecord | SyntaxInputError]:
    """Parse a batch; when the batch fails, parse one by one so one bad sentence fails alone."""
    results: list[SentenceRecord | SyntaxInputError | None] = [None] * len(items)
    good = []
    for k, item in enumerate(items):
        reason = check_input(item)
        if reason is None:
            good.append(k)
        else:
            results[k] = SyntaxInputError(reason, sentence=ids[k])
    try:
        for k, rec in zip(
            good, parser.parse([items[k] for k in good], [ids[k] for k in good]), strict=False
        ):
            results[k] = rec
    except Exception:
        for k in good:
            try:
                results[k] = parser.parse([items[k]], [ids[k]])[0]
            except Exception as exc:
                reason = exc.reason if isinstance(exc, SyntaxInputError) else str(exc)
                results[k] = SyntaxInputError(reason or type(exc).__name__, sentence=ids[k])
    return [r for r in results if r is not None]


def join_sentence_trees(trees: Sequence[str]) -> str:
    """One bracketing for a line the parser split into several sentences
    (docs/papers/gated-slr.md, "Decisions").

    Each tree is normalised (TOP/ROOT unwrapped, escapes undone); several trees are joined under a
    virtual ``TOP`` root, so the boundary splits get ``1 + max(sentence tree heights)``.
    """
    import nltk

    if not trees:
        raise ValueError("no sentence trees to join")
    parsed: list[nltk.Tree] = [normalise_tree(parse_tree(t)) for t in trees]
    if len(parsed) == 1:
        return bracket(parsed[0])
    return bracket(nltk.Tree("TOP", parsed))
