"""Subword views: the pieces a configured vocabulary gives each parsed word, so features can be
shown (and returned) at the level a model reads them.

The vocabularies are HF ``tokenizers`` files the operator puts in ``PARSER_TOKENIZERS_DIR``
(``NAME.json``); a request names one by ``NAME`` only, never by path. Words are encoded
pretokenised without specials, as the trainer encodes a source (no ``</s>`` here).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from synattn_parser.settings import ParserSettings
from synattn_shared.paths import UnsafePath, confine, slug


class UnknownVocabulary(ValueError):
    """The request names a vocabulary this server does not have."""


def vocabularies(cfg: ParserSettings) -> list[str]:
    """Names of the configured vocabularies (``NAME`` of each ``NAME.json``)."""
    folder = cfg.tokenizers_dir
    if folder is None or not folder.is_dir():
        return []
    names = []
    for path in sorted(folder.glob("*.json")):
        try:
            names.append(slug(path.stem, "vocabulary"))
        except UnsafePath:
            continue
    return names


@lru_cache(maxsize=16)
def _load(path: str, mtime: float) -> Tokenizer:
    return Tokenizer.from_file(path)


def vocabulary(cfg: ParserSettings, name: str) -> Tokenizer:
    """The vocabulary ``name``, confined to the configured folder.

    Raises:
        UnknownVocabulary: no folder is configured, or it holds no such file.
    """
    folder = cfg.tokenizers_dir
    if folder is None:
        raise UnknownVocabulary("this server has no subword vocabularies (PARSER_TOKENIZERS_DIR)")
    try:
        path = confine(f"{slug(name, 'tokenizer')}.json", folder, "tokenizer")
    except UnsafePath as exc:
        raise UnknownVocabulary(str(exc)) from None
    if not path.is_file():
        known = ", ".join(vocabularies(cfg)) or "none"
        raise UnknownVocabulary(f"no vocabulary {name!r}; this server has: {known}")
    try:
        return _load(str(path), Path(path).stat().st_mtime)
    except Exception as exc:  # a broken file is the operator's problem, not a 500
        raise UnknownVocabulary(f"vocabulary {name!r} cannot be read: {exc}") from None


def pieces(tok: Tokenizer, words: Sequence[str]) -> tuple[list[str], list[int]]:
    """The subword pieces of ``words`` and each piece's word index."""
    enc = tok.encode(list(words), is_pretokenized=True, add_special_tokens=False)
    return list(enc.tokens), [-1 if w is None else int(w) for w in enc.word_ids]
