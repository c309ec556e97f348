"""PTB bracketed trees (``.mrg``/``.tree``, one or more trees per file) through ``nltk.Tree``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from synattn_shared.errors import SyntaxInputError
from synattn_shared.records import SentenceRecord
from synattn_shared.syntax.trees import MAX_TREE_DEPTH, bracket, parse_tree

__all__ = ["MAX_TREE_DEPTH", "parse_tree", "read_ptb", "read_ptb_text", "split_brackets"]
from synattn_shared.textfile import read_text


def split_brackets(text: str, source: str = "<string>") -> Iterator[tuple[int, str]]:
    """Yield ``(start_line, tree_text)`` for each top-level bracketed tree in ``text``.

    Raises:
        SyntaxInputError: on a ``)`` without its ``(``, text outside any tree, or an unclosed
            tree; the message names the tree number and the line where it starts.
    """
    depth = 0
    start = -1
    start_line = line = 1
    count = 0
    for pos, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif ch == "(":
            if depth == 0:
                start, start_line = pos, line
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                # the stray ')' most likely belongs to the tree that just closed
                raise SyntaxInputError(
                    "unbalanced brackets: ')' without a matching '('",
                    source=source,
                    line=line,
                    sentence=max(count, 1),
                )
            if depth == 0:
                count += 1
                yield start_line, text[start : pos + 1]
        elif depth == 0 and not ch.isspace():
            raise SyntaxInputError(
                f"unexpected text {ch!r} outside a bracketed tree",
                source=source,
                line=line,
                sentence=count + 1,
            )
    if depth > 0:
        raise SyntaxInputError(
            f"unbalanced brackets: tree not closed ({depth} '(' still open at end of file)",
            source=source,
            line=start_line,
            sentence=count + 1,
        )


def read_ptb_text(text: str, source: str = "<string>") -> Iterator[SentenceRecord]:
    """Records from PTB text: words = leaves of the normalised tree, ``tree`` = its bracketing."""
    for k, (line, chunk) in enumerate(split_brackets(text, source), start=1):
        tree = parse_tree(chunk, source=source, line=line, sentence=k)
        words = tuple(str(w) for w in tree.leaves())
        yield SentenceRecord(
            sent_id=str(k - 1), words=words, pretokenized=True, tree=bracket(tree), line=line
        )


TREES_FIX = "give Penn Treebank bracketed trees as UTF-8 text (.mrg)"


def read_ptb(path: str | Path) -> Iterator[SentenceRecord]:
    """Records from a PTB bracketed file (one or more trees, any line layout); ``BadFile``
    names a file that cannot be read or is not UTF-8 (with its line)."""
    p = Path(path)
    return read_ptb_text(read_text(p, fix=TREES_FIX), source=str(p))
