"""Head analysis of a trained checkpoint (docs/papers/headmask.md, "Analysis"): importance,
confidence, masking curves, statistics and figures. Everything runs in eval mode, teacher-forced
on references."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from synattn_shared.atomic import atomic_write_text
from synattn_trainer import headmask
from synattn_trainer.config import DecodeConfig
from synattn_trainer.data import Corpus, load_corpus, make_batch, token_batches
from synattn_trainer.decode import translate_corpus
from synattn_trainer.evaluate import corpus_bleu
from synattn_trainer.loading import load_model
from synattn_trainer.model import Transformer
from synattn_trainer.tokenizer import EOS_ID, PAD_ID, load_tokenizer


def _batches(model: Transformer, corpus: Corpus, max_tokens: int = 2048):  # type: ignore[no-untyped-def]
    """``corpus`` in batches on the model's device (a CUDA model was handed CPU batches until
    the first GPU run: the end-of-training gate log of gated SLR failed there)."""
    requests = model.feature_requests()
    device = next(model.parameters()).device
    for index in token_batches(corpus.src_lens(), corpus.tgt_lens() - 1, max_tokens, 0, -1):
        yield make_batch(corpus, index, requests).to(device)


@torch.no_grad()
def dev_gates(model: Transformer, corpus: Corpus) -> dict[str, float]:
    """Gated SLR's gate per layer and head over a dev set, in eval mode (the gated-SLR paper's
    Fig. 3):
    ``{"enc_self.0.gate.h0": mean, "enc_self.0.gate_std.h0": std, ...}`` over sentences."""
    from synattn_trainer.variants.slr import Slr

    was_training = model.training
    model.eval()
    gated = [
        (kind, layer, v)
        for kind, layer, m in model.attention_modules()
        for v in m.variant.members()
        if isinstance(v, Slr) and v.gate is not None
    ]
    rows: dict[tuple[str, int], list[torch.Tensor]] = {(k, i): [] for k, i, _ in gated}
    try:
        if gated:
            for b in _batches(model, corpus):
                model.encode(b.src, b.syntax)
                for kind, layer, v in gated:
                    assert v.last_gate is not None
                    rows[(kind, layer)].append(v.last_gate.float().cpu())
    finally:
        model.train(was_training)
    out: dict[str, float] = {}
    for (name, index), parts in rows.items():
        g = torch.cat(parts)  # [sentences, H]
        for h in range(g.shape[1]):
            out[f"{name}.{index}.gate.h{h}"] = round(float(g[:, h].mean()), 5)
            out[f"{name}.{index}.gate_std.h{h}"] = round(float(g[:, h].std(unbiased=False)), 5)
    return out


def importance(model: Transformer, corpus: Corpus) -> np.ndarray:
    """``[G]`` mean over sentences of ``|dNLL(x)/d xi_g|`` (HeadMask's analysis definition)."""
    model.eval()
    total = np.zeros(model.num_heads)
    n = 0
    for batch in _batches(model, corpus):
        total += headmask.sentence_importance(model, batch).sum(0).cpu().numpy()
        n += batch.src.shape[0]
    return total / max(n, 1)


@torch.no_grad()
def confidence(model: Transformer, corpus: Corpus) -> np.ndarray:
    """``[G]`` token-weighted mean of each head's row maximum, EOS queries and keys excluded and
    padding ignored (Voita et al.)."""
    model.eval()
    mods = model.attention_modules()
    for _, _, m in mods:
        m.keep_probs = True
    sums = np.zeros(model.num_heads)
    rows = np.zeros(model.num_heads)
    try:
        for b in _batches(model, corpus):
            model(b.src, b.tgt_in, b.syntax)
            src_ok = b.src.ne(PAD_ID) & b.src.ne(EOS_ID)
            tgt_ok = b.tgt_in.ne(PAD_ID)
            for kind, _, m in mods:
                q_ok = src_ok if kind == "enc_self" else tgt_ok
                k_ok = tgt_ok if kind == "dec_self" else src_ok
                a = m.last_probs.float().masked_fill(~k_ok[:, None, None, :], 0.0)  # type: ignore[union-attr]
                best = a.max(-1).values * q_ok[:, None, :]
                g = slice(m.gate_offset, m.gate_offset + m.h)
                sums[g] += best.sum((0, 2)).cpu().numpy()
                rows[g] += float(q_ok.sum())
    finally:
        for _, _, m in mods:
            m.keep_probs = False
            m.last_probs = None
    return sums / np.maximum(rows, 1)


@torch.no_grad()
def bleu_with_masked(
    model: Transformer, corpus: Corpus, masked: list[int], tok: Any, settings: DecodeConfig
) -> float:
    """Test BLEU with the given heads gated to 0 (same decoding as unmasked)."""
    model.eval()
    model.set_head_gates(headmask.mask_gates(model.num_heads, masked, corpus_device(model)))
    try:
        hyps = translate_corpus(model, corpus, tok, settings)
    finally:
        model.set_head_gates(None)
    return corpus_bleu(hyps, corpus.refs).score


def run_metrics_of(checkpoint: Path) -> Path | None:
    """The training log of the run a checkpoint belongs to: ``metrics.jsonl`` beside a final
    model (``averaged.pt``, ``best.pt``) or beside its ``checkpoints/`` folder."""
    for folder in (checkpoint.parent, checkpoint.parent.parent):
        if (folder / "metrics.jsonl").is_file():
            return folder / "metrics.jsonl"
    return None


def corpus_device(model: Transformer) -> torch.device:
    return next(model.parameters()).device


def importance_statistics(checkpoint: Path, dev: Path) -> dict[str, float]:
    """The HeadMask paper's Tables 5-6 for one model: the mean and the population variance of
    its heads' importance on ``dev``. Cheap (one backward pass over the set), so every training
    run records them and a report compares any system with its baseline, not only HeadMask's."""
    model, cfg = load_model(checkpoint)
    tok = load_tokenizer(cfg.data.tokenizer)
    imp = importance(model, load_corpus(dev, tok, source_eos=cfg.data.source_eos))
    return {"importance_mean": float(imp.mean()), "importance_variance": float(imp.var())}


def analyze(
    checkpoint: Path,
    dev: Path,
    out: Path,
    test: Path | None = None,
    test_limit: int | None = None,
    group_count: int = 8,
    normalize: bool = False,
    ablate: Sequence[int] = (),
) -> dict[str, Any]:
    """Write ``analysis.json`` and PNGs to ``out``; returns the JSON content. ``ablate``: fixed
    heads switched off for this analysis only (the fixed-pattern paper's test-time ablation)."""
    from synattn_trainer.plots import heatmap_png, importance_histogram, masking_curves_png

    model, cfg = load_model(checkpoint)
    model.eval()
    model.ablate_fixed_heads(ablate)
    tok = load_tokenizer(cfg.data.tokenizer)
    dev_data = load_corpus(dev, tok, source_eos=cfg.data.source_eos)
    imp = importance(model, dev_data)
    sizes = model.heads_per_module()
    imp_norm = headmask.normalise_by_layer(imp, sizes)
    ranked = imp_norm if normalize else imp
    conf = confidence(model, dev_data)
    names = [model.head_name(g) for g in range(model.num_heads)]
    result: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "heads": names,
        "importance": imp.tolist(),
        "importance_layer_normalised": imp_norm.tolist(),
        "ranking_uses": "layer_normalised" if normalize else "raw",
        "ablated_fixed_heads": list(ablate),
        "importance_mean": float(imp.mean()),
        "importance_variance": float(imp.var()),  # population variance (ddof = 0)
        "confidence": conf.tolist(),
        "ranking": np.argsort(-ranked, kind="stable").tolist(),
    }
    out.mkdir(parents=True, exist_ok=True)
    for key, values in (("importance", imp), ("confidence", conf)):
        rows = list(dict.fromkeys(n.rsplit(".", 1)[0] for n in names))
        modules = np.full((len(rows), max(sizes)), np.nan)  # 1L: one head beside eight
        for name, v in zip(names, values, strict=True):
            module, head = name.rsplit(".", 1)
            modules[rows.index(module), int(head)] = v
        heatmap_png(modules, rows, f"head {key}", out / f"{key}.png")
    importance_histogram(imp, out / "importance-hist.png")
    if test is not None:
        test_data = load_corpus(test, tok, limit=test_limit, source_eos=cfg.data.source_eos)
        schedule = headmask.masking_schedule(ranked, group_count)
        d = cfg.decode
        curves = {
            order: [bleu_with_masked(model, test_data, m, tok, d) for m in masks]
            for order, masks in (
                ("descending", schedule["descending"]),
                ("ascending", schedule["ascending"]),
            )
        }
        single = [bleu_with_masked(model, test_data, g, tok, d) for g in schedule["groups"]]
        result["groups"] = schedule["groups"]
        result["masking_curves"] = curves
        result["mask_one_group"] = single
        masking_curves_png(schedule, curves, out / "masking-curves.png")
    metrics = run_metrics_of(checkpoint)
    if metrics is not None:
        from synattn_trainer.mask_frequency import summary
        from synattn_trainer.plots import mask_heatmap

        masks = summary(metrics)
        if masks:
            result["training_masks"] = masks
            mask_heatmap(metrics, out / "masks.png")
    atomic_write_text(out / "analysis.json", json.dumps(result, indent=1))
    return result
