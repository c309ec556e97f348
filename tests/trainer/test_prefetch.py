"""Batches built ahead in worker processes (``Trainer(loader_workers=N)``): the same tensors in
the same order as inline, so a run's numbers do not depend on the setting, across epochs,
gradient accumulation and a resume mid-epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from synattn_trainer.data import make_batch, token_batches
from synattn_trainer.prefetch import BatchPrefetcher
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
