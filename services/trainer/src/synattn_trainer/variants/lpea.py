"""LPEA: -|tanh(W M + b) U| over clipped local-phrase positions (seed 000; METHODS-syntax §4.4)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from synattn_shared.syntax.phrase import RP_OUT
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import LpeaConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import on_heads


class PhrasalBias(nn.Module):
    """The LPEA parameters of one layer and the gather ``P_ij = beta[idx_ij]`` (never [T,T,Dh])."""

    def __init__(self, d_head: int, k: int, lp_outside: str) -> None:
        super().__init__()
        self.k = k
        self.lp_outside = lp_outside
        rows = 2 * k + 2 if lp_outside == "extra_index" else 2 * k + 1
        self.table = nn.Parameter(torch.randn(rows, d_head) * d_head**-0.5)
        self.proj = nn.Linear(d_head, d_head)
        self.u = nn.Parameter(torch.randn(d_head) * d_head**-0.5)

    def beta(self) -> Tensor:
        """``beta_r = -|tanh(W_P w_r + b_P) . U_P|`` for every index row."""
        return -(torch.tanh(self.proj(self.table)) @ self.u).abs()

    def forward(self, rp: Tensor) -> Tensor:
        """``[B, 1, T, T]`` bias from the RP matrix (``RP_OUT`` marks pairs outside the phrase)."""
        rp = rp.long()
        out = rp.eq(RP_OUT)
        idx = rp.clamp(-self.k, self.k) + self.k
        if self.lp_outside == "extra_index":
            idx = torch.where(out, torch.full_like(idx, 2 * self.k + 1), idx)
        bias = self.beta()[idx]
        if self.lp_outside == "mask":
            bias = bias.masked_fill(out, -math.inf)
        return bias[:, None]


@register("lpea", LpeaConfig)
class Lpea(AttentionVariant):
    config: LpeaConfig

    features = ("rp",)

    def __init__(
        self, config: LpeaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.phrasal = PhrasalBias(self.d_head, config.k, config.lp_outside)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        return on_heads(self.phrasal(ctx.syntax["rp"]), self.config.heads, self.heads)
