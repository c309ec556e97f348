"""Subword vocabularies of the parser service: named, confined, and read as the trainer does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from synattn_parser.settings import ParserSettings
from synattn_parser.subwords import UnknownVocabulary, pieces, vocabularies, vocabulary
from synattn_trainer.tokenizer import encode_source, load_tokenizer
from tests.trainer.conftest import m30k  # noqa: F401  (session fixture: parsed data + vocab)


def test_vocabularies_are_named_confined_and_match_the_trainer(
    m30k: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    shutil.copy(m30k["tokenizer"], tmp_path / "m30k.json")
    (tmp_path / "escape.json").symlink_to("/etc/passwd")
    (tmp_path / "broken.json").write_text("{not json")
    cfg = ParserSettings(tokenizers_dir=tmp_path)
    assert vocabularies(cfg) == ["broken", "escape", "m30k"]
    words = ["Two", "dogs", "playfully", "wrestle", "."]
    tok_pieces, s2w = pieces(vocabulary(cfg, "m30k"), words)
    _, [expected] = encode_source(load_tokenizer(m30k["tokenizer"]), [words], eos=False)
    assert s2w == expected and len(tok_pieces) == len(s2w)
    with pytest.raises(UnknownVocabulary, match="outside"):
        vocabulary(cfg, "escape")
    with pytest.raises(UnknownVocabulary, match="cannot be read"):
        vocabulary(cfg, "broken")
    with pytest.raises(UnknownVocabulary, match="no vocabulary 'other'"):
        vocabulary(cfg, "other")
    with pytest.raises(UnknownVocabulary):
        vocabulary(ParserSettings(), "m30k")
