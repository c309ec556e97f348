"""Training on a GPU (issue 27's GPU part): CUDA with bf16 autocast, for vanilla and for
variants that bring their own kernels' inputs (bias, mask, routing). Runs only where CUDA
exists; on a CPU-only machine (CI, this project's development machines) it skips and says so.
On a machine without spaCy or ../shared/data (the lent GPU machine, ``bench/gpu/gpu_device.sh``) it
trains on the `make data` shards that ``SYNATTN_TEST_M30K`` names."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from synattn_trainer.train import Trainer
from tests.trainer.conftest import preset_config, tiny_config

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine (CPU-only torch)"
)


@pytest.fixture(scope="module")
def data(request: pytest.FixtureRequest) -> dict[str, Path]:
    """A `make data` folder named by SYNATTN_TEST_M30K, else the trainer tests' parsed subset."""
    prebuilt = os.environ.get("SYNATTN_TEST_M30K")
    if not prebuilt:
        return request.getfixturevalue("m30k")  # type: ignore[no-any-return]
    root = Path(prebuilt)
    paths = {
        "train": root / "train",
        "valid": root / "valid",
        "tokenizer": root / "tokenizer.json",
    }
    missing = [str(p) for p in paths.values() if not p.exists()]
    assert not missing, f"SYNATTN_TEST_M30K={prebuilt} lacks {missing} (make data)"
    return paths


@pytest.mark.parametrize(
    "attention",
    [
        {},
        {"enc_self": [{"name": "dea", "layers": [0]}]},
        {"enc_self": [{"name": "slr", "options": {"mode": "gated"}}]},
        {"enc_self": [{"name": "routing", "layers": [0]}]},
    ],
    ids=["vanilla", "dea", "slr-gated", "routing"],
)
def test_trains_on_cuda_in_bf16(data: dict[str, Path], tmp_path: Path, attention: dict) -> None:  # type: ignore[type-arg]
    cfg = tiny_config(data, attention=attention, train={"max_updates": 30, "precision": "auto",
                                                         "average_last": 1})  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run", device=torch.device("cuda"), progress=False)
    assert trainer.autocast_dtype is torch.bfloat16  # auto: bf16 on CUDA
    start = trainer.validate()["valid_loss"]
    result = trainer.train()
    end = trainer.validate()["valid_loss"]
    assert result.update == 30 and math.isfinite(end) and end < start
    assert all(p.device.type == "cuda" for p in trainer.model.parameters())
    hyps = trainer.translate(trainer.valid_data, limit=8)
    assert len(hyps) == 8


def test_the_head_analyses_run_on_a_cuda_model(data: dict[str, Path], tmp_path: Path) -> None:
    """Importance, confidence and gated SLR's dev gates take the model's device (they were
    handed CPU batches: the first GPU run failed in the gates' end-of-training log)."""
    from synattn_trainer.analysis import confidence, dev_gates, importance

    attention = {"enc_self": [{"name": "slr", "options": {"mode": "gated"}}]}
    cfg = tiny_config(data, attention=attention, train={"max_updates": 2, "average_last": 1})
    trainer = Trainer(cfg, tmp_path / "run", device=torch.device("cuda"), progress=False)
    corpus = trainer.valid_data
    heads = trainer.model.num_heads
    for scores in (importance(trainer.model, corpus), confidence(trainer.model, corpus)):
        assert scores.shape == (heads,) and all(math.isfinite(float(x)) for x in scores)
    gates = dev_gates(trainer.model, corpus)
    assert gates and all(0.0 <= v <= 1.0 for k, v in gates.items() if ".gate.h" in k)


def test_batches_built_ahead_feed_a_cuda_model(data: dict[str, Path], tmp_path: Path) -> None:
    """``loader_workers``: the prefetch processes fork from a process that holds a CUDA context
    (they never touch CUDA) and the run trains as it does inline."""
    attention = {"enc_self": [{"name": "dea", "layers": [0]}]}
    cfg = tiny_config(data, attention=attention, train={"max_updates": 20, "average_last": 1})
    trainer = Trainer(
        cfg, tmp_path / "run", device=torch.device("cuda"), progress=False, loader_workers=2
    )
    start = trainer.validate()["valid_loss"]
    assert trainer.train().update == 20
    assert trainer.validate()["valid_loss"] < start


@pytest.mark.parametrize("preset", ["vanilla", "disagreement-output", "fixed-word"])
def test_an_update_never_makes_the_host_wait_for_the_device(
    data: dict[str, Path], preset: str
) -> None:
    """The forward and backward of an update queue their kernels without a single host-device
    synchronisation (``set_sync_debug_mode("error")`` raises at any): the scored target
    positions come from the host with the batch, the padding mask is built without asking
    whether there is padding, ``disagreement``'s token count stays a device tensor, and the
    fixed heads' patterns come built with the batch."""
    from synattn_trainer.data import load_corpus, make_batch
    from synattn_trainer.model import Transformer
    from synattn_trainer.tokenizer import load_tokenizer
    from synattn_trainer.train import update_loss

    cfg = preset_config(data, preset)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(cfg.data.valid, tok, source_eos=cfg.data.source_eos)
    cuda = torch.device("cuda")
    model = Transformer(cfg, tok.get_vocab_size()).to(cuda).train()
    batch = make_batch(corpus, list(range(8)), model.feature_requests()).to(cuda)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _, _ = update_loss(model, batch, 0.1, batch.ntokens)
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert math.isfinite(float(loss))


def test_cuda_training_keeps_attention_off_cudnn(data: dict[str, Path], tmp_path: Path) -> None:
    """By default the trainer keeps SDPA off cuDNN's fused attention, which plans a kernel per
    batch shape (on an H100 it cost 253 ms of host time per Transformer-base update); with
    ``train.cudnn_attention`` the choice is torch's again."""
    from torch.profiler import ProfilerActivity, profile

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        cfg = tiny_config(data, train={"max_updates": 2, "average_last": 1})
        trainer = Trainer(cfg, tmp_path / "off", device=torch.device("cuda"), progress=False)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            trainer.train()
            torch.cuda.synchronize()
        names = {e.key for e in prof.key_averages()}
        assert not any("cudnn_attention" in n for n in names), sorted(names)
        assert any("attention" in n for n in names)  # SDPA ran, on another kernel
        on = tiny_config(data, train={"max_updates": 1, "average_last": 1,
                                      "cudnn_attention": True})  # fmt: skip
        Trainer(on, tmp_path / "on", device=torch.device("cuda"), progress=False)
        assert torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
