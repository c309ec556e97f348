"""Batches built ahead in worker processes (``Trainer(loader_workers=N)``): the same tensors in
the same order as inline, so a run's numbers do not depend on the setting, across epochs,
gradient accumulation and a resume mid-epoch. And without workers, the mapped corpus's pages
read a few batches ahead by a thread (``read_ahead``), which changes nothing but when the
disk is read."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
import torch

from synattn_trainer.data import make_batch, token_batches
from synattn_trainer.encoded import MappedCorpus
from synattn_trainer.prefetch import BatchPrefetcher, read_ahead
from synattn_trainer.train import Trainer
from tests.trainer.conftest import tiny_config

SLR = {"enc_self": [{"name": "slr", "options": {"mode": "gated"}}]}  # batches carry syntax


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_prefetched_batches_are_the_inline_batches(m30k: dict[str, Path], tmp_path: Path) -> None:
    trainer = Trainer(tiny_config(m30k, attention=SLR), tmp_path / "run", progress=False)
    data, requests = trainer.train_data, trainer.requests
    assert requests  # the syntax features are part of what is compared
    groups = token_batches([len(s) for s in data.src], [len(t) - 1 for t in data.tgt], 800, 1, 0)
    with BatchPrefetcher(data, requests, workers=2, ahead=3) as prefetcher:
        built = list(prefetcher.batches(groups))
        early = next(iter(prefetcher.batches(groups[3:])))  # a loop left early; the pool lives on
        again = list(prefetcher.batches(groups[:2]))
    assert len(built) == len(groups) > 3
    wanted = [*groups, groups[3], *groups[:2]]
    for got, index in zip([*built, early, *again], wanted, strict=True):
        want = make_batch(data, index, requests)
        assert got.index == want.index
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert got.syntax.keys() == want.syntax.keys()
        for key in want.syntax:
            assert torch.equal(got.syntax[key], want.syntax[key]), key


def test_training_with_loader_workers_is_bitwise_the_inline_run(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    """Over an epoch boundary with gradient accumulation, inline and with two loader
    processes, the prefetched run interrupted mid-epoch and resumed: the same parameters."""
    cfg = tiny_config(
        m30k,
        attention=SLR,
        data={"max_tokens": 3000},
        optim={"accumulate": 2},
        train={"max_updates": 8, "checkpoint_every_updates": 4, "average_last": 1, "seed": 5},
    )
    inline = Trainer(cfg, tmp_path / "inline", progress=False)
    assert inline.train().epoch >= 1  # an epoch boundary was crossed
    ahead = Trainer(cfg, tmp_path / "ahead", progress=False, loader_workers=2)
    assert ahead.train(stop_after_updates=3).stopped == "interrupted"
    resumed = Trainer(cfg, tmp_path / "ahead", progress=False, loader_workers=2)
    end = resumed.train()
    assert end.update == 8
    a, b = _params(inline.model), _params(resumed.model)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_batch_that_fails_to_build_raises_where_it_is_needed(
    m30k: dict[str, Path], tmp_path: Path
) -> None:
    trainer = Trainer(tiny_config(m30k, attention=SLR), tmp_path / "run", progress=False)
    with BatchPrefetcher(trainer.train_data, trainer.requests, workers=1) as prefetcher:
        batches = prefetcher.batches([[0, 1], [len(trainer.train_data) + 5], [2]])
        assert next(batches).index == [0, 1]
        with pytest.raises(IndexError):
            next(batches)


def test_loader_workers_and_ahead_are_checked(m30k: dict[str, Path], tmp_path: Path) -> None:
    cfg = tiny_config(m30k)
    with pytest.raises(ValueError, match="loader_workers"):
        Trainer(cfg, tmp_path / "run", progress=False, loader_workers=-1)
    trainer = Trainer(cfg, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="at least one worker"):
        BatchPrefetcher(trainer.train_data, trainer.requests, workers=0)


def test_read_ahead_gives_every_group_in_order_after_its_pages_in_a_thread() -> None:
    groups = [[k, k + 1] for k in range(0, 20, 2)]
    touched: list[tuple[list[int], str]] = []
    got = []
    for k, group in enumerate(read_ahead(groups, lambda g: touched.append((g, _thread())), 3)):
        got.append(group)
        # this group's pages were read before it came; never more than 3 groups ahead
        assert k + 1 <= len(touched) <= k + 3
    assert got == groups
    assert [g for g, _ in touched] == groups
    assert {name for _, name in touched} == {"synattn-read-ahead_0"}


def _thread() -> str:
    return threading.current_thread().name


def test_read_ahead_is_lazy_raises_a_failed_read_and_checks_depth() -> None:
    endless = ([k] for k in itertools.count())
    seen = read_ahead(endless, lambda g: None, depth=2)
    assert [next(seen) for _ in range(5)] == [[k] for k in range(5)]
    seen.close()

    def fail(group: list[int]) -> None:
        if group == [1]:
            raise IndexError("row out of range")

    later = read_ahead([[0], [1], [2]], fail)
    assert next(later) == [0]
    with pytest.raises(IndexError, match="out of range"):
        next(later)
    with pytest.raises(ValueError, match="depth"):
        next(read_ahead([[0]], lambda g: None, depth=0))


def test_training_on_a_mapped_corpus_reads_each_batch_ahead(
    m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline training reads ahead the very batches it trains on, in their order (a resumed
    epoch from where it stopped); with loader workers, which read their own rows, it does not."""
    seen: list[tuple[list[int], str]] = []
    real = MappedCorpus.read_ahead

    def spy(self: MappedCorpus, index: list[int]) -> None:
        seen.append((list(index), _thread()))
        real(self, index)

    trained: list[list[int]] = []
    real_step = Trainer.step

    def step(self: Trainer, group: list) -> object:
        trained.extend(list(b) for b in group if isinstance(b, list))
        return real_step(self, group)

    monkeypatch.setattr(MappedCorpus, "read_ahead", spy)
    monkeypatch.setattr(Trainer, "step", step)
    cfg = tiny_config(
        m30k, train={"max_updates": 5, "checkpoint_every_updates": 2, "average_last": 1}
    )
    Trainer(cfg, tmp_path / "run", progress=False).train(stop_after_updates=2)
    Trainer(cfg, tmp_path / "run", progress=False).train()
    assert len(trained) == 5
    reads = [g for g, _ in seen]
    assert all(name == "synattn-read-ahead_0" for _, name in seen)
    for group in trained:  # each read before its update, the resumed run from its position
        assert group in reads
    first = len(reads) - 1 - reads[::-1].index(trained[2])  # the resumed run's first read
    assert reads[first : first + 3] == trained[2:]
    seen.clear()
    Trainer(cfg, tmp_path / "workers", progress=False, loader_workers=1).train()
    assert seen == []
