"""Why does a HeadMask model lose quality when every head is switched on? Evidence from one run.

Reads a HeadMask run folder (its ``metrics.jsonl`` and a model file) and prints:

- **masks over training**: per window of updates, how many heads were masked at all, the
  largest share of batches one head was masked in, the heads masked in at least half the
  batches, and (Impt-N) the share of masked heads whose batch-mean ``dL/dxi`` was positive,
  i.e. whose output raised the loss when they were chosen;
- **validation per epoch**: the all-heads loss beside the loss with heads masked as in
  training (both logged by the trainer);
- **the model evaluated** on the validation split (NLL per target token, no label smoothing):
  every head on; the heads masked in at least half of the last window's batches switched off;
  as many heads drawn at random switched off (median of 5 draws); masks drawn as in training
  (Impt-N's ranking on each validation batch, in eval mode); and the head-importance mean and
  variance (the HeadMask paper's Tables 5-6 statistics).

A model whose loss drops when its often-masked heads are switched off, and is lowest under
training-like masks, lost its quality in heads that were kept from training.

    synattn analyze build/diag/runs/<exp>/headmask-impt-s1 --masks --dev build/m30k/valid \
        --out results/headmask-diagnose/headmask-impt-s1
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import torch


def epochs(metrics: Path) -> list[dict[str, float]]:
    """Each epoch's all-heads and masked validation loss."""
    out = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("event") == "epoch" and "valid_loss_masked" in r:
            out.append({"update": r["update"], "valid_loss": round(r["valid_loss"], 4),
                        "valid_loss_masked": round(r["valid_loss_masked"], 4)})  # fmt: skip
    return out


def nll(model: Any, corpus: Any, masks: Any) -> float:
    """NLL per target token on ``corpus``, ``masks(batch, i)`` giving each batch's masked heads
    (the trainer's validation loop: ``losses.corpus_losses``)."""
    from synattn_trainer import headmask
    from synattn_trainer.losses import corpus_losses

    device = torch.device("cpu")

    def gates(b: Any, i: int) -> Any:
        return headmask.mask_gates(model.num_heads, masks(b, i), device)

    return corpus_losses(model, corpus, model.feature_requests(), 4096, device, 0.0, gates)[1]


def evaluate(model_file: Path, often: list[str], data: Path | None) -> dict[str, Any]:
    """The model's validation NLL under each masking, and its head-importance statistics."""
    from synattn_trainer import headmask
    from synattn_trainer.analysis import importance
    from synattn_trainer.data import load_corpus
    from synattn_trainer.headmask_training import VALID_MICRO
    from synattn_trainer.loading import load_model
    from synattn_trainer.tokenizer import load_tokenizer

    model, cfg = load_model(model_file)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(data or Path(cfg.data.valid), tok, source_eos=cfg.data.source_eos)
    names = [model.head_name(g) for g in range(model.num_heads)]
    index = {f"{n.rsplit('.', 1)[0]}.h{n.rsplit('.', 1)[1]}": g for g, n in enumerate(names)}
    often_ids = sorted(index[h] for h in often)
    sizes = model.heads_per_module()

    def as_in_training(b: Any, i: int) -> list[int]:  # the trainer's validate_masked
        with torch.enable_grad():
            masked, _ = headmask.heads_to_mask(
                model, b, cfg.headmask, (cfg.train.seed, 0, VALID_MICRO + i),
                cfg.optim.label_smoothing, sizes,
            )  # fmt: skip
        return masked

    out: dict[str, Any] = {"model": str(model_file), "sentences": len(corpus)}
    out["nll_all_heads"] = nll(model, corpus, lambda b, i: [])
    out["often_masked"] = often
    out["nll_often_masked_off"] = nll(model, corpus, lambda b, i: often_ids) if often else None
    if often:

        def drawn(seed: int) -> Any:
            return lambda b, i: headmask.random_heads(model.num_heads, len(often_ids), 12345,
                                                      seed, 0)  # fmt: skip

        draws = [nll(model, corpus, drawn(s)) for s in range(5)]
        out["nll_random_same_count_off"] = statistics.median(draws)
        out["nll_random_same_count_off_draws"] = draws
    out["nll_masked_as_in_training"] = nll(model, corpus, as_in_training)
    imp = importance(model, corpus)
    out["importance_mean"] = float(imp.mean())
    out["importance_variance"] = float(imp.var())
    out["importance_top"] = [
        [names[g], round(float(imp[g]), 3)] for g in np.argsort(-imp, kind="stable")[:10]
    ]
    return out


def diagnose(
    run: Path, data: Path | None = None, window: int = 500, model: Path | None = None
) -> tuple[dict[str, Any], list[str]]:
    """A HeadMask run read back: its recorded masks per window, its validation losses with
    all heads and as in training, and its model with the often-masked heads off, random heads
    off and masks as in training; the JSON record and the lines to print
    (``synattn analyze --masks``)."""
    from synattn_trainer import checkpoint as ck
    from synattn_trainer.mask_frequency import summary

    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{metrics}: no such file (is {run} a run folder?)")
    masks = summary(metrics, window)
    if not masks:
        raise ValueError(f"{metrics}: no headmask records (not a HeadMask run, or one trained "
                         "before they were logged)")  # fmt: skip
    lines = [f"{'updates':>11} {'masked':>6} {'top':>5} {'harmful':>7}  heads masked in >= half"]
    for w in masks["windows"]:
        harmful = "-" if w["harmful_share"] is None else f"{w['harmful_share']:.2f}"
        lines.append(
            f"{w['updates'][0]:>5}-{w['updates'][1]:<5} {w['heads_ever_masked']:>6} "
            f"{w['top_share']:>5.2f} {harmful:>7}  {' '.join(w['often_masked'])}"
        )
    lines.append(f"mask entropy over the run: {masks['entropy_bits']:.2f} bits")
    ep = epochs(metrics)
    lines.append("validation loss, all heads / masked as in training:")
    pairs = [f"{e['update']}: {e['valid_loss']:.3f} / {e['valid_loss_masked']:.3f}" for e in ep]
    lines.append("  " + "; ".join(pairs))
    model_file = model or run / "averaged.pt"
    if not model_file.is_file():
        latest = ck.latest(run / "checkpoints")
        if latest is None:
            raise ValueError(f"{run}: no averaged.pt and no checkpoints")
        model_file = latest
    ev = evaluate(model_file, masks["often_masked_last_window"], data)
    keys = ("nll_all_heads", "nll_often_masked_off", "nll_random_same_count_off",
            "nll_masked_as_in_training", "importance_mean", "importance_variance")  # fmt: skip
    for key in keys:
        v = ev.get(key)
        lines.append(f"{key:>28}: {'-' if v is None else f'{v:.4f}'}")
    windows = [{k: v for k, v in w.items() if k != "shares"} for w in masks["windows"]]
    record = {"run": str(run), "model": str(model_file), "masks": {**masks, "windows": windows},
              "epochs": ep, "evaluation": ev}  # fmt: skip
    return record, lines
