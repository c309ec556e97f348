"""HeadMask and head analysis against hand-checked worked examples (docs/papers/headmask.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from synattn_trainer import headmask
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.model import Transformer
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.train import Trainer
from synattn_trainer.variants import AttnContext
from synattn_trainer.variants.headgate import HeadGates
from tests.trainer.conftest import tiny_config


def test_importance_is_per_sentence_and_absolute(m30k) -> None:  # type: ignore[no-untyped-def]
    """Importance: row b of one batched backward is sentence b's own |dL/dxi| (sentences do not
    interact), and the absolute value is taken per sentence, not after summing."""
    tok = load_tokenizer(m30k["tokenizer"])
    corpus = load_corpus(m30k["valid"], tok)
    torch.manual_seed(0)
    model = Transformer(tiny_config(m30k), tok.get_vocab_size()).eval()
    batch = make_batch(corpus, [0, 1, 2])
    signed = headmask.sentence_importance(model, batch, absolute=False)
    assert signed.shape == (3, model.num_heads)
    for row in range(3):
        alone = headmask.sentence_importance(model, make_batch(corpus, [row]), absolute=False)
        torch.testing.assert_close(signed[row], alone[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(headmask.sentence_importance(model, batch), signed.abs())
    assert (signed < 0).any() and (signed > 0).any()  # so the per-sentence abs matters


def test_normalisation_selection_groups_and_statistics() -> None:
    np.testing.assert_allclose(
        headmask.normalise_by_layer([3, 4, 1, 0, 0, 0], 2), [0.6, 0.8, 1, 0, 0, 0]
    )
    assert headmask.select_important(np.array([0.5, 2.0, 1.0, 2.0, 0.1]), 2) == [1, 3]
    imp = np.array(
        [0.9, 0.1, 0.5, 0.3, 2.0, 0.05, 1.2, 0.7, 0.2, 0.4, 1.5, 0.6, 0.8, 0.0, 1.0, 0.25]
    )
    sched = headmask.masking_schedule(imp)
    assert sched["groups"] == [
        [4, 10],
        [6, 14],
        [0, 12],
        [7, 11],
        [2, 9],
        [3, 15],
        [1, 8],
        [5, 13],
    ]
    assert sched["ascending"][1:4] == [[5, 13], [1, 5, 8, 13], [1, 3, 5, 8, 13, 15]]
    assert sched["descending"][0] == [] and len(sched["descending"][8]) == 16
    a = headmask.random_heads(72, 9, seed=1, update=5, micro=0)
    assert a == headmask.random_heads(72, 9, seed=1, update=5, micro=0) and len(set(a)) == 9
    assert a != headmask.random_heads(72, 9, seed=1, update=6, micro=0)


@pytest.fixture(scope="module")
def setup(m30k: dict[str, Path]):  # type: ignore[no-untyped-def]
    tok = load_tokenizer(m30k["tokenizer"])
    return load_corpus(m30k["valid"], tok), tok


def test_importance_is_per_sentence_absolute_and_matches_finite_differences(m30k, setup) -> None:  # type: ignore[no-untyped-def]
    corpus, tok = setup
    cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0})
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).double().eval()
    batch = make_batch(corpus, [0, 1])
    signed = headmask.sentence_importance(model, batch, absolute=False)
    assert signed.shape == (2, model.num_heads)
    absolute = headmask.sentence_importance(model, batch)
    torch.testing.assert_close(absolute, signed.abs())
    one = make_batch(corpus, [1])
    g_signed = headmask.sentence_importance(model, one, absolute=False)[0]
    torch.testing.assert_close(g_signed, signed[1], rtol=1e-6, atol=1e-8)  # sentences independent
    h = 1e-5
    for g in (0, 13, model.num_heads - 1):
        vals = []
        for delta in (h, -h):
            gates = torch.ones(1, model.num_heads, dtype=torch.float64)
            gates[0, g] += delta
            model.set_head_gates(gates)
            with torch.no_grad():
                vals.append(headmask.per_sentence_loss(model, one).item())
            model.set_head_gates(None)
        fd = (vals[0] - vals[1]) / (2 * h)
        assert g_signed[g].item() == pytest.approx(fd, rel=1e-4, abs=1e-6), model.head_name(g)


@pytest.mark.parametrize("mode", ["random", "impt"])
def test_headmask_training_runs_and_inference_is_unmasked(mode, m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tiny_config(m30k, train={"max_updates": 3}, headmask={"mode": mode, "n": 5})
    trainer = Trainer(cfg, tmp_path / mode, progress=False)
    seen: list[list[int]] = []
    real = trainer._headmask_gates

    def spy(batch, micro):  # type: ignore[no-untyped-def]
        gates = real(batch, micro)
        seen.append((gates[0] == 0).nonzero().flatten().tolist())
        return gates

    trainer._headmask_gates = spy  # type: ignore[method-assign]
    trainer.train()
    assert len(seen) == 3 and all(len(s) == 5 for s in seen)
    assert all(m.head_gates.gates is None for _, _, m in trainer.model.attention_modules())


def test_analyze_cli_writes_json_and_figures(m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    Trainer(tiny_config(m30k, train={"max_updates": 4}), tmp_path / "run", progress=False).train()
    out = tmp_path / "analysis"
    res = subprocess.run(
        [sys.executable, "-m", "synattn_shared.cli", "analyze",
         str(tmp_path / "run" / "averaged.pt"), "--dev", str(m30k["valid"]),
         "--test", str(m30k["valid"]), "--test-limit", "12", "--groups", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    result = json.loads((out / "analysis.json").read_text())
    g = len(result["heads"])
    assert g == 2 * 4 * 3 and result["heads"][0] == "enc_self.0.0"
    assert len(result["importance"]) == g and all(x >= 0 for x in result["importance"])
    imp = np.array(result["importance"])  # population variance (ddof 0), as analysis reports it
    assert result["importance_variance"] == pytest.approx(imp.var())
    assert result["importance_variance"] != pytest.approx(imp.var(ddof=1))
    assert all(0 < c <= 1 for c in result["confidence"])
    curves = result["masking_curves"]
    assert len(curves["descending"]) == 5 and curves["descending"][0] == curves["ascending"][0]
    assert curves["descending"][-1] == curves["ascending"][-1]  # everything masked either way
    for png in ("importance.png", "confidence.png", "importance-hist.png", "masking-curves.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")


def test_head_gates_are_a_hook_after_the_variant_and_not_in_checkpoints(m30k, setup) -> None:  # type: ignore[no-untyped-def]
    _, tok = setup
    cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0})
    model = Transformer(cfg, tok.get_vocab_size()).eval()
    for _, _, m in model.attention_modules():
        first, last = m.hooks.members()
        assert first is m.variant and last is m.head_gates and isinstance(last, HeadGates)
    assert not any("head_gates" in k or "hooks" in k for k in model.state_dict())
    # gating every head of the first encoder layer to 0 leaves only W^O's bias there
    x = torch.randn(1, 5, cfg.model.d_model)
    attn = model.encoder[0].self_attn
    gates = torch.ones(1, model.num_heads)
    gates[0, : attn.h] = 0
    model.set_head_gates(gates)
    ctx = AttnContext("enc_self", 0, None, None)
    with torch.no_grad():
        out = attn(x, x, ctx)
    model.set_head_gates(None)
    torch.testing.assert_close(out, attn.out_proj.bias.expand(1, 5, -1))
