"""The ``given`` backend: parses the user supplies (PTB bracketings or CoNLL-U blocks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from synattn_parser.backends.base import SentenceInput
from synattn_shared.errors import SyntaxInputError
from synattn_shared.manifest import ParserInfo
from synattn_shared.readers.conllu_reader import read_conllu_text
from synattn_shared.readers.ptb import read_ptb_text
from synattn_shared.records import SentenceRecord


class GivenParser:
    """Reads each input string as one PTB bracketing (starts with ``(``) or one CoNLL-U block."""

    info = ParserInfo(backend="given", model=None, version=None, constituency="given")

    def parse(self, items: Sequence[SentenceInput], ids: Sequence[str]) -> list[SentenceRecord]:
        """One record per given parse.

        Raises:
            SyntaxInputError: an item is not exactly one valid tree or CoNLL-U sentence.
        """
        out = []
        for item, sid in zip(items, ids, strict=True):
            if not isinstance(item, str):
                raise SyntaxInputError(
                    "the given backend takes a PTB tree or a CoNLL-U block, not a token list",
                    sentence=sid,
                )
            text = item.strip()
            reader = read_ptb_text if text.startswith("(") else read_conllu_text
            records = list(reader(text, source=f"sentence {sid}"))
            if len(records) != 1:
                raise SyntaxInputError(f"expected one parse, found {len(records)}", sentence=sid)
            out.append(replace(records[0], sent_id=sid, line=None))
        return out
