"""CoNLL-U dependency files through the ``conllu`` package, with located errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import conllu

from synattn_shared.errors import SyntaxInputError
from synattn_shared.records import SentenceRecord
from synattn_shared.syntax.dependency import validate_heads
from synattn_shared.textfile import read_text


def _blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """Sentence blocks (lines up to a blank line) with their 1-based first line."""
    block: list[str] = []
    first = 1
    for no, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            if not block:
                first = no
            block.append(line)
        elif block:
            yield first, block
            block = []
    if block:
        yield first, block


def _sent_id(block: list[str]) -> str | None:
    for line in block:
        if line.startswith("#") and "=" in line and line[1:].split("=", 1)[0].strip() == "sent_id":
            return line.split("=", 1)[1].strip()
    return None


def _first_bad_line(block: list[str]) -> int:
    """Offset of the first token line with the wrong field count or a non-integer id/head."""
    for off, line in enumerate(block):
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            return off
        tid, head = fields[0], fields[6]
        if tid.isdigit() and not (head.isdigit() or head == "_"):
            return off
    return 0


def _token_line(block: list[str], first: int, token_id: int) -> int:
    """File line of the token with integer id ``token_id`` inside a block."""
    for off, line in enumerate(block):
        if line.split("\t", 1)[0] == str(token_id):
            return first + off
    return first


def read_conllu_text(text: str, source: str = "<string>") -> Iterator[SentenceRecord]:
    """Records from CoNLL-U text; multiword-token lines and empty nodes are skipped.

    Raises:
        SyntaxInputError: malformed lines, heads outside ``[0, n]``, cycles, empty sentences; the
            message names the file line and the sentence id.
    """
    for k, (first, block) in enumerate(_blocks(text)):
        sid = _sent_id(block) or str(k)
        try:
            parsed = conllu.parse("\n".join(block) + "\n\n")
        except Exception as exc:  # conllu raises ParseException and plain ValueErrors
            raise SyntaxInputError(
                f"malformed CoNLL-U: {exc}",
                source=source,
                line=first + _first_bad_line(block),
                sentence=sid,
            ) from exc
        if not parsed:
            continue
        sent = parsed[0]
        tokens = [t for t in sent if isinstance(t["id"], int)]
        if not tokens:
            raise SyntaxInputError(
                "empty sentence (no tokens)", source=source, line=first, sentence=sid
            )
        ids = [t["id"] for t in tokens]
        if ids != list(range(1, len(ids) + 1)):
            raise SyntaxInputError(
                f"token ids must run 1..{len(ids)}, got {ids[:10]}",
                source=source,
                line=first,
                sentence=sid,
            )
        heads: list[int] = []
        for t in tokens:
            h = t["head"]
            if not isinstance(h, int):
                raise SyntaxInputError(
                    f"token {t['id']} ({t['form']!r}) has no integer head ({h!r})",
                    source=source,
                    line=_token_line(block, first, t["id"]),
                    sentence=sid,
                )
            heads.append(h)
        try:
            validate_heads(heads)
        except ValueError as exc:
            tok = next((i + 1 for i, h in enumerate(heads) if not 0 <= h <= len(heads)), None)
            line = _token_line(block, first, tok) if tok else first
            raise SyntaxInputError(str(exc), source=source, line=line, sentence=sid) from exc

        def col(name: str, toks: list[conllu.Token] = tokens) -> tuple[str, ...] | None:
            vals = [t[name] for t in toks]
            return None if all(v is None for v in vals) else tuple(v or "_" for v in vals)

        yield SentenceRecord(
            sent_id=str(sid),
            words=tuple(t["form"] for t in tokens),
            pretokenized=True,
            dep_head=tuple(heads),
            dep_rel=col("deprel"),
            upos=col("upos"),
            xpos=col("xpos"),
            line=first,
        )


CONLLU_FIX = "give a CoNLL-U file as UTF-8 text (.conllu)"


def read_conllu(path: str | Path) -> Iterator[SentenceRecord]:
    """Records from a CoNLL-U file; ``BadFile`` names a file that cannot be read or is not
    UTF-8 (with its line)."""
    p = Path(path)
    return read_conllu_text(read_text(p, fix=CONLLU_FIX), source=str(p))
