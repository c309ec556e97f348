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
from tests.trainer.conftest import tiny_config, trainer_cli


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


def test_impt_scores_rank_absolute_signed_and_per_module() -> None:
    """Impt-N's candidate readings on one hand-checked batch of 2 sentences and 4 heads in two
    modules of 2: the paper's mean |dL/dxi|, the signed first-order loss increase, and Michel et
    al.'s per-module L2 normalisation before the global ranking."""
    signed = torch.tensor([[-3.0, 1.0, 0.5, 0.0], [1.0, 1.0, -0.5, 0.2]])
    absolute = headmask.impt_scores(signed)
    torch.testing.assert_close(absolute, torch.tensor([2.0, 1.0, 0.5, 0.1]))
    assert headmask.select_important(absolute, 2) == [0, 1]
    # head 1 raises the loss in both sentences (dL/dxi > 0): never important when signed
    rise = headmask.impt_scores(signed, "signed")
    torch.testing.assert_close(rise, torch.tensor([1.0, -1.0, 0.0, -0.1]))
    assert headmask.select_important(rise, 2) == [0, 2]
    batch = headmask.impt_scores(signed, "batch_absolute")
    torch.testing.assert_close(batch, torch.tensor([1.0, 1.0, 0.0, 0.1]))
    assert headmask.select_important(batch, 2) == [0, 1]
    per_module = headmask.impt_scores(signed, "absolute", "per_module", [2, 2])
    np.testing.assert_allclose(per_module, [2 / 5**0.5, 1 / 5**0.5, 0.5 / 0.26**0.5,
                                            0.1 / 0.26**0.5], rtol=1e-6)  # fmt: skip
    assert headmask.select_important(per_module, 2) == [0, 2]


def test_heads_to_mask_draws_random_n_and_ranks_impt_n_on_the_training_loss(m30k, setup) -> None:  # type: ignore[no-untyped-def]
    """One choice for the trainer and the diagnosis: Random-N is the seeded draw of its
    (seed, update, micro-step); Impt-N takes the top n of the batch's importance of the
    label-smoothed loss training uses (not the plain NLL: with smoothing the two differ), and
    returns the batch's mean signed dL/dxi."""
    from synattn_trainer.config import HeadMaskConfig

    corpus, tok = setup
    torch.manual_seed(0)
    model = Transformer(tiny_config(m30k), tok.get_vocab_size()).eval()
    batch = make_batch(corpus, list(range(8)))
    sizes = model.heads_per_module()
    random_n = HeadMaskConfig(mode="random", n=3)
    masked, signed = headmask.heads_to_mask(model, batch, random_n, (7, 40, 1), 0.1, sizes)
    assert masked == headmask.random_heads(model.num_heads, 3, 7, 40, 1) and signed is None
    impt = HeadMaskConfig(mode="impt")  # n: 12.5% of the heads
    n = max(1, round(0.125 * model.num_heads))
    masked, signed = headmask.heads_to_mask(model, batch, impt, (7, 40, 1), 0.1, sizes)

    def smoothed(m: Transformer, b: object) -> torch.Tensor:
        return headmask.per_sentence_loss(m, b, 0.1)  # type: ignore[arg-type]

    expected = headmask.sentence_importance(model, batch, smoothed, absolute=False)
    assert len(masked) == n and signed is not None
    assert masked == headmask.select_important(expected.abs().mean(0), n)
    torch.testing.assert_close(signed, expected.mean(0))
    plain = headmask.sentence_importance(model, batch, absolute=False)
    assert not torch.allclose(plain, expected)  # the loss it ranks by matters


def test_mask_tally_records_each_heads_share_and_resets() -> None:
    tally = headmask.MaskTally(["enc_self.0.0", "enc_self.0.1", "dec_self.1.0"])
    assert tally.record(5) is None
    tally.add([0, 2], torch.tensor([0.3, -1.0, -0.2]))
    tally.add([0, 1], torch.tensor([-0.1, -1.0, 0.4]))
    rec = tally.record(7)
    assert rec == {"event": "headmask", "update": 7, "batches": 2,
                   "enc_self.0.masked.h0": 1.0, "enc_self.0.masked.h1": 0.5,
                   "dec_self.1.masked.h0": 0.5, "harmful_share": 0.25}  # fmt: skip
    tally.add([1])  # Random-N: no gradient, no harmful share
    assert tally.record(8) == {"event": "headmask", "update": 8, "batches": 1,
                               "enc_self.0.masked.h0": 0.0, "enc_self.0.masked.h1": 1.0,
                               "dec_self.1.masked.h0": 0.0}  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "options"),
    [("random", {}), ("impt", {}), ("impt", {"ranking": "per_module", "importance": "signed"})],
)
def test_headmask_runs_log_mask_shares_and_masked_validation(
    mode, options, m30k, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Every HeadMask run logs which heads it masked per log interval (shares that add up to
    N per batch) and validates with masks drawn as in training beside the all-heads loss."""
    cfg = tiny_config(
        m30k, train={"max_updates": 4, "log_every": 2}, headmask={"mode": mode, "n": 5, **options}
    )
    trainer = Trainer(cfg, tmp_path / mode, progress=False)
    trainer.train()
    records = [
        json.loads(line) for line in (tmp_path / mode / "metrics.jsonl").read_text().splitlines()
    ]
    masks = [r for r in records if r["event"] == "headmask"]
    assert [r["update"] for r in masks] == [1, 2, 4]
    for r in masks:
        shares = [v for k, v in r.items() if ".masked.h" in k]
        assert len(shares) == trainer.model.num_heads
        assert sum(shares) == pytest.approx(5.0)
        assert ("harmful_share" in r) == (mode == "impt")
    epochs = [r for r in records if r["event"] == "epoch"]
    assert epochs and all(np.isfinite(r["valid_loss_masked"]) for r in epochs)
    assert all(r["valid_loss_masked"] != r["valid_loss"] for r in epochs)


def test_vanilla_runs_log_no_masks(m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    trainer = Trainer(tiny_config(m30k, train={"max_updates": 2}), tmp_path, progress=False)
    trainer.train()
    text = (tmp_path / "metrics.jsonl").read_text()
    assert '"headmask"' not in text and "valid_loss_masked" not in text


def test_headmask_diagnosis_reads_the_masks_and_evaluates_the_model(m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """synattn analyze --masks on a short Impt-N run: the mask windows from its log, the
    validation pairs, and the model evaluated with its often-masked heads off."""
    cfg = tiny_config(
        m30k, train={"max_updates": 6, "log_every": 2}, headmask={"mode": "impt", "n": 3}
    )
    Trainer(cfg, tmp_path / "run", progress=False).train()
    done = trainer_cli("analyze", str(tmp_path / "run"), "--masks", "--window", "3", "--dev",
                       str(m30k["valid"]), "--out", str(tmp_path / "analysis"))  # fmt: skip
    assert "mask entropy over the run" in done.output
    record = json.loads((tmp_path / "analysis" / "headmask_diagnosis.json").read_text())
    windows = record["masks"]["windows"]
    assert [w["updates"] for w in windows] == [[1, 3], [4, 6]]
    assert all(1 <= w["heads_ever_masked"] <= 3 * 3 for w in windows)
    ev = record["evaluation"]
    assert ev["often_masked"] == record["masks"]["often_masked_last_window"]
    for key in ("nll_all_heads", "nll_masked_as_in_training", "importance_variance"):
        assert np.isfinite(ev[key])
    assert record["epochs"] and "valid_loss_masked" in record["epochs"][0]


def test_headmask_diagnosis_refuses_a_run_without_mask_records(m30k, tmp_path) -> None:  # type: ignore[no-untyped-def]
    Trainer(tiny_config(m30k, train={"max_updates": 1}), tmp_path, progress=False).train()
    done = trainer_cli("analyze", str(tmp_path), "--masks", "--dev", str(m30k["valid"]),
                       "--out", str(tmp_path / "analysis"), status=2)  # fmt: skip
    assert "no headmask records" in done.output and "Traceback" not in done.output
