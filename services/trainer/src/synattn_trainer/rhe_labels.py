"""RHE's head labels over training: how often would a head count as important, and why not?

The RHE paper's method enlivens a head with syntax for a sentence when its syntactic mass does not
beat its dynamic gate, ``Syn_attn <= sigmoid(h_conf)`` (docs/papers/rhe-sea.md, "RHE"): a head is
important only if more than half (50-73%) of its attention lies on the word itself, its dependency
head or its dependents. In the 600-update study almost no head ever passed, so RHE enlivened every
head ("+LPEA+RHE" became "+LPEA"). This script measures the labels on a dev set for each checkpoint
of a run and takes the three suspects apart (``synattn analyze RUN --rhe-labels``):

- **budget**: the label rate against the update of the checkpoint (a learning curve's run keeps
  one every K updates);
- **EOS**: the mass on the source ``</s>`` counts as non-syntactic; the rate is also given with
  ``</s>`` taken out of the keys and each row renormalised (a model without a source EOS);
- **threshold**: the rate under a fixed gate of 0.5 (the paper's Fig. 4) beside the dynamic gate,
  and the mean ``Syn_attn`` and ``sigmoid(h_conf)`` they are compared with;
- **reading**: the paper gives two criteria. Its prose calls a head important "when the average
  of syntactic attention weights is higher than the average of maximum attention weights",
  ``Syn_attn > h_conf`` (``confidence``, the ``rhe`` option ``gate: confidence``); its Eq. 10
  compares with ``sigmoid(h_conf)`` (``dynamic``, the default). Both rates are given.

A vanilla checkpoint's plain attention is what RHE would label; an RHE checkpoint reports every
reading on the plain attention its own layer labelled, and the labels it applied
(``applied_<gate>``). Prints one table row per checkpoint and layer and writes JSON.

    synattn analyze build/curve/vanilla-s1 --rhe-labels --every 1000 --dev build/m30k/valid \\
        --out results/rhe-labels/vanilla-s1
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

ARGMAX = ("argmax_self", "argmax_neighbour", "argmax_eos", "argmax_adjacent_unrelated",
          "argmax_other")  # fmt: skip
LABELS = ("dynamic", "confidence", "fixed_0.5", "dynamic_no_eos", "confidence_no_eos")


def layer_labels(
    probs: torch.Tensor, related: torch.Tensor, real: torch.Tensor, eos: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per (sentence, head) of one layer: the labels under each reading, and the measures.

    ``probs`` ``[B, H, T, T]`` plain attention; ``related`` ``[B, T, T]`` (dep hops <= 1);
    ``real`` and ``eos`` ``[B, T]`` masks of real positions and of the source ``</s>``."""
    from synattn_trainer.variants.rhe import head_measures

    query = real & ~eos
    h_conf, syn = head_measures(probs, related, query, real)
    keys = real & ~eos
    no_eos = probs.float().masked_fill(~keys[:, None, None, :], 0.0)
    no_eos = no_eos / no_eos.sum(-1, keepdim=True).clamp(min=1e-9)
    h_conf_x, syn_x = head_measures(no_eos, related, query, keys)
    q = query[:, None, :].float()
    eos_mass = (probs.float() * eos[:, None, None, :].float()).sum(-1)
    return {
        **readings(h_conf, syn),
        **argmax_targets(probs, related, query, eos),
        "dynamic_no_eos": syn_x > torch.sigmoid(h_conf_x),
        "confidence_no_eos": syn_x > h_conf_x,
        "eos_mass": (eos_mass * q).sum(-1) / q.sum(-1).clamp(min=1),
    }


def argmax_targets(
    probs: torch.Tensor, related: torch.Tensor, query: torch.Tensor, eos: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Where each head's largest weight goes, per (sentence, head): the share of queries whose
    most-attended key is the token itself, a dependency neighbour (head or dependent, or another
    piece of the same word), the source ``</s>``, the next or previous token when that is not a
    neighbour, or anything else. ``h_conf`` averages that largest weight, ``Syn_attn`` counts
    only the first two kinds: this says what a confident head is confident about."""
    b, h, t, _ = probs.shape
    top = probs.float().argmax(-1)  # [B, H, T]
    pos = torch.arange(t)
    rel = related[:, None].expand(b, h, t, t).gather(-1, top[..., None])[..., 0]
    own = top == pos
    to_eos = eos[:, None, :].expand(b, h, t).gather(-1, top)
    adjacent = (top - pos).abs() == 1
    kinds = {
        "argmax_self": own,
        "argmax_neighbour": rel & ~own & ~to_eos,
        "argmax_eos": to_eos,
        "argmax_adjacent_unrelated": adjacent & ~rel & ~to_eos,
    }
    kinds["argmax_other"] = ~(kinds["argmax_self"] | kinds["argmax_neighbour"] | to_eos |
                               kinds["argmax_adjacent_unrelated"])  # fmt: skip
    q = query[:, None, :].float()
    n = q.sum(-1).clamp(min=1)
    return {k: (v.float() * q).sum(-1) / n for k, v in kinds.items()}


def readings(h_conf: torch.Tensor, syn: torch.Tensor) -> dict[str, torch.Tensor]:
    """The labels under each reading of RHE's criterion, and the measures they compare:
    Eq. 10 (``dynamic``: Syn_attn > sigmoid(h_conf)), the paper's prose (``confidence``:
    Syn_attn > h_conf) and the fixed gate of its Fig. 4 (0.5)."""
    return {
        "dynamic": syn > torch.sigmoid(h_conf),
        "confidence": syn > h_conf,
        "fixed_0.5": syn > 0.5,
        "syn_attn": syn,
        "gate": torch.sigmoid(h_conf),
        "h_conf": h_conf,
    }


@torch.no_grad()
def measure(checkpoint: Path, data: Path, layers: list[int] | None) -> dict[str, Any]:
    """Label rates per encoder layer of one checkpoint on a split."""
    from synattn_shared.requests import DeaMask
    from synattn_trainer.data import load_corpus, make_batch, token_batches
    from synattn_trainer.loading import load_model
    from synattn_trainer.tokenizer import EOS_ID, PAD_ID, load_tokenizer
    from synattn_trainer.variants.rhe import Rhe

    model, cfg = load_model(checkpoint)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(data, tok, source_eos=cfg.data.source_eos)
    enc = [(i, m) for kind, i, m in model.attention_modules() if kind == "enc_self"]
    enc = [(i, m) for i, m in enc if layers is None or i in layers]
    requests = {*model.feature_requests(), DeaMask()}
    parts: dict[int, dict[str, list[torch.Tensor]]] = {i: {} for i, _ in enc}
    for _, m in enc:
        m.keep_probs = True
    try:
        for index in token_batches(
            [len(s) for s in corpus.src], [len(t) - 1 for t in corpus.tgt], 2048, 0, -1
        ):
            b = make_batch(corpus, index, requests)
            model.encode(b.src, b.syntax)
            real, eos = b.src.ne(PAD_ID), b.src.eq(EOS_ID)
            for i, m in enc:
                rhe = [v for v in m.variant.members() if isinstance(v, Rhe)]
                if rhe:  # the measures on the plain attention the model itself labelled
                    assert rhe[0].last_measures is not None
                    got = readings(*rhe[0].last_measures)
                    assert rhe[0].last_labels is not None
                    got["applied_" + rhe[0].config.gate] = rhe[0].last_labels
                else:
                    assert m.last_probs is not None
                    got = layer_labels(m.last_probs, b.syntax[DeaMask()], real, eos)
                for key, value in got.items():
                    parts[i].setdefault(key, []).append(value.float().cpu())
    finally:
        for _, m in enc:
            m.keep_probs, m.last_probs = False, None
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    out: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "update": state.get("update"),
        "source_eos": cfg.data.source_eos,
        "sentences": len(corpus),
        "layers": {},
    }
    for i, collected in parts.items():
        cat = {k: torch.cat(v) for k, v in collected.items()}  # [sentences, H]
        rec: dict[str, Any] = {}
        for key in cat:
            if key.startswith("applied_") or key in LABELS:
                lab = cat[key]
                rec[key] = {
                    "head_sentence_share": round(float(lab.mean()), 4),
                    "sentences_with_any": round(float(lab.amax(1).mean()), 4),
                    "per_head": [round(float(x), 4) for x in lab.mean(0)],
                }
        for key in ("syn_attn", "gate", "h_conf", "eos_mass", *ARGMAX):
            if key in cat:
                rec[f"mean_{key}"] = round(float(cat[key].mean()), 4)
        out["layers"][str(i)] = rec
    return out


def label_report(
    run: Path, data: Path, every: int = 1, layers: list[int] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """RHE's labels under both readings at every checkpoint of ``run`` (a run folder; every
    ``every``-th update) or at one checkpoint, on ``data``: the JSON record and the table's
    lines (``synattn analyze --rhe-labels``)."""
    from synattn_trainer.checkpoint import checkpoints, update_of

    if run.is_file():
        ckpts = [run]
    else:
        ckpts = [p for p in checkpoints(run / "checkpoints") if update_of(p) % every == 0]
    if not ckpts:
        raise ValueError(f"{run}: no checkpoints")
    results = []
    lines = [f"{'update':>7} {'layer':>5} {'Eq.10':>6} {'any':>6} {'prose':>6} {'any':>6} "
             f"{'no-EOS':>7} {'gate0.5':>8} {'Syn_attn':>9} {'h_conf':>7} {'sigm':>6} "
             f"{'EOS mass':>9}"]  # fmt: skip
    for path in ckpts:
        res = measure(path, data, layers)
        results.append(res)
        for layer, rec in res["layers"].items():

            def share(key: str, what: str = "head_sentence_share", rec: Any = rec) -> str:
                return f"{rec[key][what]:.3f}" if key in rec else "-"

            def mean(key: str, rec: Any = rec) -> float:
                return float(rec.get(f"mean_{key}", float("nan")))

            lines.append(
                f"{res['update']:>7} {layer:>5} {share('dynamic'):>6} "
                f"{share('dynamic', 'sentences_with_any'):>6} {share('confidence'):>6} "
                f"{share('confidence', 'sentences_with_any'):>6} {share('dynamic_no_eos'):>7} "
                f"{share('fixed_0.5'):>8} {mean('syn_attn'):>9.3f} {mean('h_conf'):>7.3f} "
                f"{mean('gate'):>6.3f} {mean('eos_mass'):>9.3f}"
            )
    return {"data": str(data), "checkpoints": results}, lines
