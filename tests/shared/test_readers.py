"""Readers and malformed input: clear errors that name the sentence and the line."""

from __future__ import annotations

import pytest

from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import to_row
from synattn_shared.readers.conllu_reader import read_conllu, read_conllu_text
from synattn_shared.readers.ptb import read_ptb_text
from synattn_shared.records import SentenceRecord
from tests.conftest import RUNNING_TREE, RUNNING_WORDS, data_file


def conllu(rows: list[tuple[int, str, int]], sent_id: str = "s1") -> str:
    lines = [f"# sent_id = {sent_id}"]
    for i, form, head in rows:
        lines.append(f"{i}\t{form}\t{form}\tX\tX\t_\t{head}\tdep\t_\t_")
    return "\n".join(lines) + "\n\n"


def test_ptb_reader_normalises_and_keeps_lines():
    text = f"( {RUNNING_TREE} )\n\n(TOP (S (NP (-NONE- *)) (VP (VB Go)) (. !)))\n"
    recs = list(read_ptb_text(text, "t.mrg"))
    assert recs[0].words == RUNNING_WORDS and recs[0].line == 1
    assert recs[1].words == ("Go", "!") and recs[1].line == 3
    row = to_row(recs[0])
    assert row["syn_dist"] == [3, 2, 1, 2, 1, 3]
    assert row["const_layer"] == [3, 3, 4, 4, 4, 5, 2]


def test_ptb_unescapes_brackets():
    (rec,) = read_ptb_text("(S (-LRB- -LRB-) (NN x) (-RRB- -RRB-))")
    assert rec.words == ("(", "x", ")")


@pytest.mark.parametrize(
    ("text", "line", "sentence", "fragment"),
    [
        ("(S (NN a)\n(S (NN b)", 1, 1, "not closed"),
        ("(S (NN a))\n(S (NN b)))", 2, 2, "without a matching"),
        ("(S (NN a))\nfoo (S (NN b))", 2, 2, "outside a bracketed tree"),
        ("(S (NN a))\n\n(S)", 3, 2, "empty tree"),
    ],
)
def test_ptb_malformed(text, line, sentence, fragment):
    with pytest.raises(SyntaxInputError, match=fragment) as info:
        list(read_ptb_text(text, "bad.mrg"))
    assert info.value.line == line
    assert info.value.sentence == sentence
    assert str(info.value).startswith(f"bad.mrg:{line}: sentence {sentence}:")


def test_conllu_cycle_names_sentence_and_line():
    text = conllu([(1, "a", 0), (2, "b", 1)], "ok") + conllu([(1, "x", 2), (2, "y", 1)], "cyc")
    with pytest.raises(SyntaxInputError, match="cycle") as info:
        list(read_conllu_text(text, "c.conllu"))
    assert info.value.sentence == "cyc"
    assert info.value.line == 5


def test_conllu_out_of_range_head_points_at_token_line():
    text = conllu([(1, "a", 0), (2, "b", 7)], "far")
    with pytest.raises(SyntaxInputError, match="outside") as info:
        list(read_conllu_text(text, "c.conllu"))
    assert (info.value.sentence, info.value.line) == ("far", 3)
    assert "c.conllu:3: sentence far:" in str(info.value)


def test_conllu_non_integer_head():
    text = "# sent_id = s\n1\ta\ta\tX\tX\t_\tzz\tdep\t_\t_\n\n"
    with pytest.raises(SyntaxInputError) as info:
        list(read_conllu_text(text, "c.conllu"))
    assert info.value.sentence == "s"


def test_conllu_skips_multiword_tokens_and_empty_nodes():
    text = (
        "# sent_id = mw\n"
        "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
        "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n"
        "3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n"
        "3.1\tgone\tgo\tVERB\tVB\t_\t_\t_\t_\t_\n\n"
    )
    (rec,) = read_conllu_text(text)
    assert rec.words == ("do", "n't", "go")
    assert rec.dep_head == (3, 3, 0)


def test_empty_sentence_is_rejected():
    with pytest.raises(SyntaxInputError, match="empty"):
        SentenceRecord(sent_id="e", words=())


def test_one_token_sentence():
    (rec,) = read_conllu_text(conllu([(1, "Hi", 0)]))
    row = to_row(rec)
    assert row["syn_dist"] == [] and row["const_layer"] == [1] and row["has_syntax"]


def test_500_token_sentences():
    n = 500
    chain = conllu([(i, f"w{i}", i - 1 if i > 1 else 0) for i in range(1, n + 1)])
    (rec,) = read_conllu_text(chain)
    row = to_row(rec)
    assert len(row["syn_dist"]) == n - 1
    assert row["syn_dist"][0] == n - 1  # right-branching chain: heights fall by one per word
    assert row["const_layer"][-1] == n  # deeper than uint8 would hold
    tree = "(S " * (n - 1) + "(X w) " + " ".join(["(X w))"] * (n - 1))
    (deep,) = read_ptb_text(tree)
    assert len(to_row(deep)["syn_dist"]) == n - 1


def test_tree_leaves_that_do_not_match_words_mean_no_syntax():
    rec = SentenceRecord(sent_id="m", words=("a", "b"), tree="(S (X a) (X c))")
    row = to_row(rec)
    assert row["has_syntax"] is False


def test_ud_ewt_dev_reads_completely():
    path = data_file("ud_ewt", "en_ewt-ud-dev.conllu")
    records = list(read_conllu(path))
    assert len(records) == 2001
    rows = [to_row(r) for r in records]
    assert all(r["has_syntax"] for r in rows)
    assert all(len(r["syn_dist"]) == len(r["words"]) - 1 for r in rows)


def test_batched_rows_name_the_first_bad_record():
    from synattn_shared.features import to_rows

    good = SentenceRecord(sent_id="g", words=("a", "b"), dep_head=(0, 1))
    loop = SentenceRecord(sent_id="loop", words=("a", "b"), dep_head=(2, 1), line=7)
    assert to_rows([good, good])[1]["syn_dist"] == [1]
    with pytest.raises(SyntaxInputError, match="cycle") as info:
        to_rows([good, loop, good])
    assert (info.value.sentence, info.value.line) == ("loop", 7)
