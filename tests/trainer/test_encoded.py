"""The memory-mapped corpus: the same pairs, batches, losses and parameters as the in-memory
corpus it replaced, and a cache that is never used for shards or a tokenizer it was not made
from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from synattn_trainer.data import (
    MappedCorpus,
    batch_plan,
    load_corpus,
    make_batch,
    token_batches,
)
from synattn_trainer.encoded import CACHE_ENV, StaleShards, ensure_cache
from synattn_trainer.tokenizer import load_tokenizer, train_tokenizer
from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config


def reference_token_batches(
    src_lens: list[int], tgt_lens: list[int], max_tokens: int, seed: int, epoch: int
) -> list[list[int]]:
    """The batching of the trainer before the mapped corpus, verbatim (the published studies
    were trained with it)."""
    n = len(src_lens)
    src = np.asarray(src_lens)
    tgt = np.asarray(tgt_lens)
    if epoch >= 0:
        rng = np.random.default_rng([seed, epoch])
        order = np.lexsort((rng.random(n), tgt, src))
    else:
        order = np.lexsort((np.arange(n), tgt, src))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order.tolist():
        width = max(longest, int(src[i]), int(tgt[i]))
        if cur and width * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, width = [], max(int(src[i]), int(tgt[i]))
        cur.append(i)
        longest = width
    if cur:
        batches.append(cur)
    if epoch >= 0:
        perm = np.random.default_rng([seed, epoch, 1]).permutation(len(batches))
        batches = [batches[k] for k in perm.tolist()]
    return batches


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(1, 90), st.integers(2, 90)), max_size=400),
    max_tokens=st.integers(1, 600),
    seed=st.integers(0, 2**31),
    epoch=st.integers(-1, 5),
)
def test_batch_plan_equals_the_batching_the_studies_used(
    lens: list[tuple[int, int]], max_tokens: int, seed: int, epoch: int
) -> None:
    src = [a for a, _ in lens]
    tgt = [b for _, b in lens]
    expected = reference_token_batches(src, tgt, max_tokens, seed, epoch)
    assert token_batches(src, tgt, max_tokens, seed, epoch) == expected
    plan = batch_plan(
        np.asarray(src, np.int32), np.asarray(tgt, np.int32), max_tokens, seed, epoch
    )
    assert len(plan) == len(expected)
    assert list(plan[1::2]) == expected[1::2]  # a rank's share is a slice of the plan


@settings(max_examples=80, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=2000),
    max_tokens=st.integers(-3, 40),
    seed=st.integers(0, 2**31),
    epoch=st.integers(-1, 2),
)
def test_batch_plan_equals_the_reference_on_long_runs_of_equal_lengths(
    lens: list[tuple[int, int]], max_tokens: int, seed: int, epoch: int
) -> None:
    """Few distinct lengths (long runs of equal widths, as in a corpus of millions of pairs),
    empty sides and budgets below one pair: the run-at-a-time cut and the per-group sort must
    still give the pair-at-a-time batching exactly."""
    src = [a for a, _ in lens]
    tgt = [b for _, b in lens]
    expected = reference_token_batches(src, tgt, max_tokens, seed, epoch)
    assert token_batches(src, tgt, max_tokens, seed, epoch) == expected


def test_batch_plan_with_a_few_very_long_sides_equals_the_reference() -> None:
    """Sides of tens of thousands of subwords: lengths are ranked without a count per possible
    pair of lengths (which would need gigabytes here)."""
    src = [3, 40_000, 5, 3, 60_000, 5, 3]
    tgt = [4, 7, 50_000, 4, 9, 70_000, 4]
    for epoch in (-1, 0, 1):
        expected = reference_token_batches(src, tgt, 100_000, 5, epoch)
        assert token_batches(src, tgt, 100_000, 5, epoch) == expected


def test_batch_plan_at_a_million_pairs_equals_the_reference() -> None:
    rng = np.random.default_rng(3)
    n = 1_000_000
    src = rng.integers(1, 60, n).astype(np.int32)
    tgt = np.clip(src + rng.integers(-4, 9, n), 2, None).astype(np.int32)
    plan = batch_plan(src, tgt, 2048, seed=7, epoch=2)
    r = np.random.default_rng([7, 2]).random(n)
    assert np.array_equal(plan.order, np.lexsort((r, tgt, src)))
    widths = np.maximum(src, tgt)[plan.order].tolist()
    starts, count, longest = [0], 0, 0
    for pos, w in enumerate(widths):  # the cut, a pair at a time
        width = max(longest, w)
        if count and width * (count + 1) > 2048:
            starts.append(pos)
            count, width = 0, w
        count += 1
        longest = width
    assert plan.bounds.tolist() == [*starts, n]


@pytest.fixture(scope="module")
def corpora(m30k: dict[str, Path]) -> tuple[MappedCorpus, object]:
    tok = load_tokenizer(m30k["tokenizer"])
    mapped = load_corpus(m30k["train"], tok, max_len=20)
    memory = load_corpus(m30k["train"], tok, max_len=20, mapped=False)
    assert isinstance(mapped, MappedCorpus)
    return mapped, memory


def test_mapped_corpus_holds_the_in_memory_corpus_pairs(corpora: tuple) -> None:
    mapped, memory = corpora
    assert 0 < len(mapped) == len(memory) < 600  # max_len dropped some pairs
    for k in range(len(memory)):
        for a, b in ((mapped.src[k], memory.src[k]), (mapped.tgt[k], memory.tgt[k]),
                     (mapped.s2w[k], memory.s2w[k])):  # fmt: skip
            assert a.dtype == b.dtype == np.int64
            assert np.array_equal(a, b)
        assert mapped.words[k] == memory.words[k]
        assert mapped.refs[k] == memory.refs[k]
    assert list(mapped.rows) == list(memory.rows)
    assert np.array_equal(mapped.src_lens(), memory.src_lens())
    assert np.array_equal(mapped.tgt_lens(), memory.tgt_lens())
    index = [5, 0, len(memory) - 1, 5]
    assert mapped.take_rows(index) == memory.take_rows(index)
    assert mapped.refs[-1] == memory.refs[-1] and mapped.refs[:3] == memory.refs[:3]
    with pytest.raises(IndexError):
        mapped.src[len(memory)]


def test_rows_out_of_range_are_refused_by_take_rows_and_read_ahead(
    corpora: tuple, m30k: dict[str, Path]
) -> None:
    """With pairs dropped by max_len and without: negative rows count from the end, as in a
    list, and a row past either end is an IndexError (a one-row slice past the end of a record
    batch would silently give no row)."""
    mapped, memory = corpora
    whole = load_corpus(m30k["train"], load_tokenizer(m30k["tokenizer"]))
    assert isinstance(whole, MappedCorpus) and len(whole) > len(mapped)
    for corpus in (mapped, whole):
        n = len(corpus)
        assert corpus.take_rows([-1, 1 - n]) == corpus.take_rows([n - 1, 1])
        assert corpus.read_ahead([0, n - 1, -n]) is None
        assert corpus.take_rows([]) == [] and corpus.read_ahead([]) is None
        for bad in ([n], [0, n + 5], [-n - 1]):
            with pytest.raises(IndexError, match="out of range"):
                corpus.take_rows(bad)
            with pytest.raises(IndexError, match="out of range"):
                corpus.read_ahead(bad)
    assert mapped.take_rows([-1]) == memory.take_rows([-1])


def test_mapped_batches_equal_in_memory_batches(corpora: tuple, m30k: dict[str, Path]) -> None:
    from synattn_trainer.model import Transformer

    mapped, memory = corpora
    cfg = tiny_config(m30k, attention={"enc_self": [{"name": "dea"}, {"name": "slr"}]})
    requests = Transformer(cfg, 600).feature_requests()
    assert requests
    for index in token_batches(memory.src_lens(), memory.tgt_lens() - 1, 300, 3, 1)[:8]:
        a, b = make_batch(mapped, index, requests), make_batch(memory, index, requests)
        for x, y in ((a.src, b.src), (a.tgt_in, b.tgt_in), (a.gold, b.gold)):
            assert torch.equal(x, y)
        assert a.syntax.keys() == b.syntax.keys()
        for req in a.syntax:
            assert torch.equal(a.syntax[req], b.syntax[req])


def _run(m30k: dict[str, Path], out: Path, mapped: bool) -> tuple[list[float], dict]:
    cfg = tiny_config(
        m30k,
        attention={"enc_self": [{"name": "dea"}]},
        train={
            "max_updates": 10,
            "log_every": 1,
            "checkpoint_every_updates": 5,
            "average_last": 1,
        },
        data={"max_len": 30, "max_tokens": 2000},  # some 7 updates an epoch: two epochs
    )
    trainer = Trainer(cfg, out, progress=False, mapped=mapped)
    trainer.train(stop_after_updates=4)  # an interruption, then an exact resume
    Trainer(cfg, out, progress=False, mapped=mapped).train()
    losses = [
        json.loads(line)
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if '"update"' in line
    ]
    state = torch.load(out / "checkpoints" / "ckpt-00000010.pt", weights_only=False)
    return [(r["event"], r.get("loss"), r.get("valid_loss")) for r in losses], state["model"]


def test_training_on_the_mapped_corpus_is_bitwise_the_in_memory_training(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """Losses, validation and final parameters, across an interruption and resume: the
    published studies (trained on the in-memory corpus) stay reproducible."""
    log_a, params_a = _run(m30k, tmp_path / "mapped", True)
    log_b, params_b = _run(m30k, tmp_path / "memory", False)
    events = [e for e, _, _ in log_a]
    assert events.count("update") >= 10 and "epoch" in events
    assert log_a == log_b
    assert params_a.keys() == params_b.keys()
    for name in params_a:
        assert torch.equal(params_a[name], params_b[name]), name


def _copy_split(m30k: dict[str, Path], to: Path) -> Path:
    shutil.copytree(m30k["valid"], to, ignore=shutil.ignore_patterns("encoded"))
    return to


def test_a_cache_is_reused_and_rebuilt_when_its_inputs_change(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    split = _copy_split(m30k, tmp_path / "valid")
    tok = load_tokenizer(m30k["tokenizer"])
    said: list[str] = []
    first = ensure_cache(split, tok, log=said.append)
    assert first.path.parent == split / "encoded" and "first use" in said[0]
    said.clear()
    assert ensure_cache(split, tok, log=said.append) == first and said == []

    # another tokenizer: another cache, never the old one
    other = train_tokenizer(["ein kleiner Hund", "a small dog runs"] * 5, vocab_size=120)
    second = ensure_cache(split, other, log=said.append)
    assert second.path != first.path and "changed" in said[0] and first.path.name in said[0]
    assert not first.path.exists()  # the stale cache is removed
    said.clear()
    # no source </s>: another cache too
    assert ensure_cache(split, other, source_eos=False, log=said.append).path != second.path

    # re-parsed shards (a new manifest): rebuilt, and it says so
    manifest = json.loads((split / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = "0" * 64
    (split / "manifest.json").write_text(json.dumps(manifest))
    said.clear()
    third = ensure_cache(split, tok, log=said.append)
    assert third.path != first.path and said and "encoding" in said[0]


def test_a_shard_changed_under_its_manifest_is_refused_in_one_line(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    split = _copy_split(m30k, tmp_path / "valid")
    tok = load_tokenizer(m30k["tokenizer"])
    ensure_cache(split, tok, log=lambda _: None)
    with open(split / "part-00000.parquet", "ab") as fh:
        fh.write(b"junk")
    with pytest.raises(StaleShards) as err:
        load_corpus(split, tok)
    assert "\n" not in str(err.value) and "part-00000.parquet" in str(err.value)
    assert "re-run `synattn parse`" in str(err.value)


def test_a_cache_with_other_inputs_under_the_right_name_is_not_used(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """A cache directory whose meta does not record exactly these inputs is rebuilt."""
    split = _copy_split(m30k, tmp_path / "valid")
    tok = load_tokenizer(m30k["tokenizer"])
    info = ensure_cache(split, tok, log=lambda _: None)
    meta = json.loads((info.path / "meta.json").read_text())
    meta["inputs"]["tokenizer_sha256"] = "f" * 64
    (info.path / "meta.json").write_text(json.dumps(meta))
    said: list[str] = []
    again = ensure_cache(split, tok, log=said.append)
    assert (
        said
        and json.loads((again.path / "meta.json").read_text())["inputs"] == info.meta["inputs"]
    )


def test_cache_dir_from_the_environment_and_a_read_only_split(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    split = _copy_split(m30k, tmp_path / "valid")
    tok = load_tokenizer(m30k["tokenizer"])
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert ensure_cache(split, tok, log=lambda _: None).path.parent == tmp_path / "cache"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    import synattn_trainer.encoded as encoded

    # a split the user cannot write to (tests run as root here, who can write anywhere)
    real_access = os.access
    monkeypatch.setattr(
        encoded.os,
        "access",
        lambda p, mode: False if Path(p) == split and mode & os.W_OK else real_access(p, mode),
    )
    info = ensure_cache(split, tok, log=lambda _: None)
    assert info.path.parent == tmp_path / "xdg" / "synattn" / "encoded"


def test_concurrent_builds_make_one_cache(m30k: dict[str, Path], tmp_path: Path) -> None:
    """Two processes (two DDP ranks) opening a split at once: one builds, the other waits and
    maps the same file; neither reads a half-written cache."""
    split = _copy_split(m30k, tmp_path / "valid")
    code = (
        "import sys; from synattn_trainer.data import load_corpus;"
        "from synattn_trainer.tokenizer import load_tokenizer;"
        f"c = load_corpus({str(split)!r}, load_tokenizer({str(m30k['tokenizer'])!r}));"
        "print(len(c), c.info.path)"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({o for o, _ in outs}) == 1
    assert sum("encoding" in e for _, e in outs) == 1
    assert [d.name for d in (split / "encoded").iterdir() if not d.name.startswith(".")] == [
        outs[0][0].split()[1].rsplit("/", 1)[1]
    ]
