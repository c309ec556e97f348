"""RHE: redundant heads enlivened with DEA or LPEA, or pruned (Zhang et al. 2021;
docs/papers/rhe-sea.md, "RHE")."""

from __future__ import annotations

import torch
from torch import Tensor

from synattn_shared.requests import DeaBias, DeaMask, FeatureRequest, RpIndex
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.dropout import dropout
from synattn_trainer.variant_options import RheConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import logits_of, softmax
from synattn_trainer.variants.lpea import PhrasalBias


def head_measures(
    probs: Tensor, related: Tensor, query: Tensor, key: Tensor
) -> tuple[Tensor, Tensor]:
    """``h_conf`` and ``Syn_attn`` per sentence and head (``[B, H]``, detached).

    Args:
        probs: ``[B, H, T, T]`` plain attention (no syntactic bias).
        related: ``[B, T, T]`` True where ``dep_hops <= 1``.
        query: ``[B, T]`` True for real queries other than ``</s>``.
        key: ``[B, T]`` True for real keys (``</s>`` included).
    """
    a = probs.detach().float()
    q = query[:, None, :].float()
    nq = q.sum(-1).clamp(min=1)
    conf = a.masked_fill(~key[:, None, None, :], -1.0).max(-1).values
    h_conf = (conf * q).sum(-1) / nq
    syn = (a * (related & key[:, None, :])[:, None].float()).sum(-1)
    syn_attn = (syn * q).sum(-1) / nq
    return h_conf, syn_attn


def rhe_gate(h_conf: Tensor, gate: str, f_gate: float = 0.5) -> Tensor:
    """What ``Syn_attn`` must exceed for a head to count as important: ``sigmoid(h_conf)``
    (``dynamic``, Eq. 10), ``h_conf`` itself (``confidence``, the paper's prose) or ``f_gate``
    (``fixed``)."""
    if gate == "dynamic":
        return torch.sigmoid(h_conf)
    if gate == "confidence":
        return h_conf
    return torch.full_like(h_conf, f_gate)


@register("rhe", RheConfig)
class Rhe(AttentionVariant):
    """Per sentence and head: the plain attention if the head is important
    (``Syn_attn > sigmoid(h_conf)``, or ``> h_conf`` with ``gate: confidence``), else the
    syntax-enlivened one (or zero when pruning)."""

    config: RheConfig

    def __init__(
        self, config: RheConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.phrasal = (
            PhrasalBias(RpIndex(config.k, config.lp_outside), self.d_head)
            if config.sea == "lpea"
            else None
        )
        self.last_labels: Tensor | None = None
        self.last_measures: tuple[Tensor, Tensor] | None = None  # (h_conf, Syn_attn) [B, H]

    def requests(self) -> tuple[FeatureRequest, ...]:
        sea = DeaBias() if self.phrasal is None else self.phrasal.index
        return (DeaMask(), sea)

    def labels(self, probs: Tensor, ctx: AttnContext) -> Tensor:
        """``[B, H]`` True for important heads."""
        b, _, t, _ = probs.shape
        real = (
            torch.ones(b, t, dtype=torch.bool, device=probs.device)
            if ctx.key_padding is None
            else ~ctx.key_padding
        )
        query = real if ctx.src_eos is None else real & ~ctx.src_eos
        h_conf, syn_attn = head_measures(probs, ctx.syntax[DeaMask()], query, real)
        self.last_measures = (h_conf, syn_attn)
        return syn_attn > rhe_gate(h_conf, self.config.gate, self.config.f_gate)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        x = logits_of(q, k, mask)  # the peers' biases (Rel_Pos a^K, Localness G) are in mask
        plain = softmax(x)
        important = self.labels(plain, ctx)
        self.last_labels = important.detach()
        keep = important[:, :, None, None]
        out = self._values(plain, v, ctx)
        if self.config.mode == "prune":
            ctx.report(torch.where(keep, plain, torch.zeros_like(plain)))
            return torch.where(keep, out, torch.zeros_like(out))
        sea = ctx.syntax[DeaBias()][:, None] if self.phrasal is None else self.phrasal(ctx)
        lively = softmax(x + sea)
        ctx.report(torch.where(keep, plain, lively))
        enlivened = self._values(lively, v, ctx)
        return torch.where(keep, out, enlivened)

    def _values(self, probs: Tensor, v: Tensor, ctx: AttnContext) -> Tensor:
        dropped = dropout(probs, ctx.dropout, ctx.dropout > 0)
        out = dropped.to(v.dtype) @ v
        term = None if ctx.value_term is None else ctx.value_term(dropped)  # Rel_Pos a^V
        return out if term is None else out + term.to(out.dtype)

    def stats(self) -> dict[str, float]:
        if self.last_labels is None:
            return {}
        share = self.last_labels.float().mean(0).tolist()
        return {f"important.h{h}": round(s, 4) for h, s in enumerate(share)}
