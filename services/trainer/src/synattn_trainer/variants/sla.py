"""SLA: a dependency-distance local mask mixed in by a gate (Li et al. 2021;
docs/papers/index.md, "SLA")."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from synattn_shared.requests import FeatureRequest, SlaKeep
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import SlaConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import apply, logits_of, softmax


@register("sla", SlaConfig)
class Sla(AttentionVariant):
    config: SlaConfig

    def __init__(
        self, config: SlaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.gate = nn.Linear(model.d_model, 1 if config.gate == "token" else model.heads)
        self.last_gate: Tensor | None = None
        self.keep = SlaKeep(config.m, config.neighbour_union, config.punct_visible)

    def requests(self) -> tuple[FeatureRequest, ...]:
        return (self.keep,)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        assert ctx.layer_input is not None
        x = logits_of(q, k, mask)
        keep = ctx.syntax[self.keep]
        local_bias = torch.zeros_like(keep, dtype=x.dtype).masked_fill(~keep, -math.inf)
        local_p, glob_p = softmax(x + local_bias[:, None]), softmax(x)
        local = apply(local_p, v, ctx.dropout, ctx.dropout > 0)
        glob = apply(glob_p, v, ctx.dropout, ctx.dropout > 0)
        g = torch.sigmoid(self.gate(ctx.layer_input))  # [B, T, 1|H]
        self.last_gate = g.detach()
        g = g.transpose(1, 2)[..., None]  # [B, 1|H, T, 1]
        ctx.report(glob_p + g.to(glob_p.dtype) * (local_p - glob_p))  # the mix, as applied
        return glob + g * (local - glob)

    def stats(self) -> dict[str, float]:
        return (
            {} if self.last_gate is None else {"gate.mean": round(float(self.last_gate.mean()), 5)}
        )
