"""Translate or score a parsed split with a saved model (CLI and analysis)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from synattn_trainer.checkpoint import checkpoint_file_error
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.decode import forced_scores, translate_corpus
from synattn_trainer.loading import load_model
from synattn_trainer.tokenizer import load_tokenizer


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def translate_split(
    checkpoint: Path,
    data: Path,
    tokenizer: Path | None = None,
    beam: int | None = None,
    lenpen: float | None = None,
    ablate: Sequence[int] = (),
    on_batch: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Beam-search translations of every row of ``data`` (in row order); ``ablate``: fixed
    heads switched off for this run only (the fixed-pattern paper's test-time ablation);
    ``on_batch(sentences, total)`` after each batch (progress)."""
    if (bad := checkpoint_file_error(checkpoint)) is not None:
        raise bad
    device = _device()
    model, cfg = load_model(checkpoint, device)
    model.eval()
    model.ablate_fixed_heads(ablate)
    tok = load_tokenizer(tokenizer or cfg.data.tokenizer)
    corpus = load_corpus(data, tok, require_tgt=False, source_eos=cfg.data.source_eos)
    return translate_corpus(
        model, corpus, tok, cfg.decode, beam=beam, lenpen=lenpen, device=device,
        on_batch=on_batch,
    )  # fmt: skip


def score_split(checkpoint: Path, data: Path) -> list[float]:
    """Forced-decoding log-probability of each row's ``tgt`` given its source."""
    if (bad := checkpoint_file_error(checkpoint)) is not None:
        raise bad
    device = _device()
    model, cfg = load_model(checkpoint, device)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(data, tok, source_eos=cfg.data.source_eos)
    requests = model.feature_requests()
    out: list[float] = []
    for start in range(0, len(corpus), 64):
        index = list(range(start, min(len(corpus), start + 64)))
        b = make_batch(corpus, index, requests).to(device)
        tgt = torch.cat([b.tgt_in[:, :1], b.tgt_out], 1)
        out.extend(forced_scores(model, b.src, tgt, b.syntax))
    return out


def applied_attention(
    checkpoint: Path, data: Path, row: int
) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """The attention probabilities the model applied to one sentence, in eval mode, teacher
    forced on its target: ``{"enc_self.0": [H, Tq, Tk], "dec_self.0": ..., "enc_dec.0": ...}``
    over subword positions, with the source and target tokens. Every analysis figure reads
    this (never a recomputed softmax: a variant that replaces attention reports its own)."""
    from synattn_trainer.explorer import row_attention

    if (bad := checkpoint_file_error(checkpoint)) is not None:
        raise bad
    model, cfg = load_model(checkpoint)
    model.eval()
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(data, tok, require_tgt=False, source_eos=cfg.data.source_eos)
    return row_attention(model, tok, corpus, row)


def attention_npz(checkpoint: Path, data: Path, row: int, out: Path) -> Path:
    """``synattn attention``: every module's applied probabilities for one sentence, as .npz
    (plus ``src_tokens`` and ``tgt_tokens``)."""
    from synattn_shared.atomic import atomic_write_with

    arrays, src, tgt = applied_attention(checkpoint, data, row)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            named: dict[str, Any] = {
                **arrays,
                "src_tokens": np.array(src),
                "tgt_tokens": np.array(tgt),
            }
            np.savez_compressed(fh, **named)

    atomic_write_with(out, write)
    return out


def attention_of(checkpoint: Path, data: Path, row: int, kind: str, layer: int, out: Path) -> Path:
    """PNG of every head's attention in one module for one sentence (teacher forcing)."""
    from synattn_trainer.plots import attention_pngs

    arrays, src, tgt = applied_attention(checkpoint, data, row)
    name = f"{kind}.{layer}"
    if name not in arrays:
        raise ValueError(f"no {kind} layer {layer}; the model has {sorted(arrays)}")
    queries = src if kind == "enc_self" else tgt
    keys = tgt if kind == "dec_self" else src
    return attention_pngs(arrays[name], queries, keys, f"{kind} layer {layer}, row {row}", out)
