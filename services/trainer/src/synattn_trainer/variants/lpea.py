"""LPEA: -|tanh(W M + b) U| over clipped local-phrase positions (Zhang et al. 2021;
docs/papers/rhe-sea.md, "LPEA")."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from synattn_shared.requests import FeatureRequest, RpIndex
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import LpeaConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import on_heads


class PhrasalBias(nn.Module):
    """The LPEA parameters of one layer and the gather ``P_ij = beta[idx_ij]`` (never [T,T,Dh])."""

    def __init__(self, index: RpIndex, d_head: int) -> None:
        super().__init__()
        self.index = index
        k = index.k
        rows = 2 * k + 2 if index.outside == "extra_index" else 2 * k + 1
        self.table = nn.Parameter(torch.randn(rows, d_head) * d_head**-0.5)
        self.proj = nn.Linear(d_head, d_head)
        self.u = nn.Parameter(torch.randn(d_head) * d_head**-0.5)

    def beta(self) -> Tensor:
        """``beta_r = -|tanh(W_P w_r + b_P) . U_P|`` for every index row."""
        return -(torch.tanh(self.proj(self.table)) @ self.u).abs()

    def forward(self, ctx: AttnContext) -> Tensor:
        """``[B, 1, T, T]`` bias from the batch's ``RpIndex`` (``2k + 1``: outside the phrase)."""
        idx = ctx.syntax[self.index].long()
        if self.index.outside != "mask":
            return self.beta()[idx][:, None]
        out = idx.eq(2 * self.index.k + 1)
        bias = self.beta()[idx.clamp(max=2 * self.index.k)].masked_fill(out, -math.inf)
        return bias[:, None]


@register("lpea", LpeaConfig)
class Lpea(AttentionVariant):
    config: LpeaConfig

    def __init__(
        self, config: LpeaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.phrasal = PhrasalBias(RpIndex(config.k, config.lp_outside), self.d_head)

    def requests(self) -> tuple[FeatureRequest, ...]:
        return (self.phrasal.index,)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        return on_heads(self.phrasal(ctx), self.config.heads, self.heads)
