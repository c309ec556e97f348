"""SLR: soft syntactic local range, pure, averaged or gated (Hou et al.;
docs/papers/gated-slr.md)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn_shared.requests import FeatureRequest, SlrBias
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.dropout import dropout
from synattn_trainer.variant_options import SlrConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, Progress, register
from synattn_trainer.variants.common import (
    apply,
    head_mask,
    logits_of,
    on_heads,
    outside_graph,
    softmax,
)


class SlrGate(nn.Module):
    """``G = sigmoid(BatchNorm(W2 LayerNorm(ReLU(W1 maxpool(H) + b1)) + b2))``, one per head."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.fc2 = nn.Linear(d_model, heads)
        self.bn = nn.BatchNorm1d(heads)

    def forward(self, h: Tensor, padding: Tensor | None) -> Tensor:
        if padding is not None:
            h = h.masked_fill(padding[..., None], -math.inf)
        pooled = h.max(1).values  # [B, D]
        o = self.fc2(self.norm(F.relu(self.fc1(pooled))))
        if self.training and o.shape[0] == 1:  # BatchNorm needs two sentences to normalise
            o = F.batch_norm(
                o, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias
            )
        else:
            o = self.bn(o)
        return torch.sigmoid(o)


@register("slr", SlrConfig)
class Slr(AttentionVariant):
    """``pure``: ``softmax(x + log m)`` on every head; ``avg``/``gated``: per head
    ``A = A_raw + G (A_syn - A_raw)`` with ``G = 0.5`` or the gate network."""

    config: SlrConfig

    def __init__(
        self, config: SlrConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.gate = SlrGate(model.d_model, model.heads) if config.mode == "gated" else None
        self.last_gate: Tensor | None = None
        self.slr = SlrBias(tau=config.tau)

    def requests(self) -> tuple[FeatureRequest, ...]:
        return (self.slr,)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        if self.config.mode != "pure":
            return None
        return on_heads(ctx.syntax[self.slr][:, None], self.config.heads, self.heads)

    @outside_graph
    def frozen(self, state: Progress) -> bool:
        """Pre-warm-up (the paper's §4.5): the gate network takes no gradient for the first
        ``prewarm_epochs`` epochs or ``prewarm_fraction`` of the planned updates. Outside any
        compiled graph, which would otherwise recompile for every new update count."""
        c = self.config
        if state.epoch < c.prewarm_epochs:
            return True
        return bool(c.prewarm_fraction and state.update < c.prewarm_fraction * state.max_updates)

    def gate_values(self, ctx: AttnContext) -> Tensor:
        """``[B, H]`` gate per sentence and head (0 on heads that take no syntax)."""
        b = ctx.layer_input.shape[0] if ctx.layer_input is not None else 1
        device = ctx.syntax[self.slr].device
        if self.gate is None:
            g = torch.full((b, self.heads), 0.5, device=device)
        else:
            assert ctx.layer_input is not None
            if self.training and self.frozen(ctx.state):
                with torch.no_grad():
                    g = self.gate(ctx.layer_input, ctx.query_padding)
            else:
                g = self.gate(ctx.layer_input, ctx.query_padding)
        sel = head_mask(self.config.heads, self.heads, device)
        return g if sel is None else g * sel[0, :, 0, 0].to(g.dtype)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        if self.config.mode == "pure":
            return None
        x = logits_of(q, k, mask)
        raw = softmax(x)
        syn = softmax(x + ctx.syntax[self.slr][:, None])
        if self.training and self.config.ignore_p > 0:
            syn = dropout(syn, self.config.ignore_p)
        g = self.gate_values(ctx)
        self.last_gate = g.detach()
        probs = raw + g[:, :, None, None] * (syn - raw)
        ctx.report(probs)
        return apply(probs, v, ctx.dropout, ctx.dropout > 0)

    def stats(self) -> dict[str, float]:
        if self.last_gate is None:
            return {}
        means = self.last_gate.float().mean(0).tolist()
        return {f"gate.h{h}": round(m, 5) for h, m in enumerate(means)}
