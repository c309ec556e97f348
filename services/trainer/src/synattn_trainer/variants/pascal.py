"""PASCAL: logits scaled by a Gaussian on the parent (Bugliarello & Okazaki 2020;
docs/papers/index.md, "PASCAL")."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from synattn_shared.requests import FeatureRequest, PascalCentre
from synattn_trainer.variant_options import PascalConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import apply, head_mask, logits_of, softmax


@register("pascal", PascalConfig)
class Pascal(AttentionVariant):
    config: PascalConfig

    def requests(self) -> tuple[FeatureRequest, ...]:
        return (PascalCentre(),)

    def density(self, centres: Tensor, tk: int) -> Tensor:
        """``N_sj`` ``[B, T, T]``: normal density around each query's centre."""
        s = self.config.sigma
        j = torch.arange(tk, device=centres.device, dtype=torch.float32)
        return torch.exp(-((j - centres[..., None].float()) ** 2) / (2 * s * s)) / math.sqrt(
            2 * math.pi * s * s
        )

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        x = logits_of(q, k, None)
        n = self.density(ctx.syntax[PascalCentre()], k.shape[2])[:, None].expand_as(x)
        if self.training and self.config.parent_ignoring > 0:
            drop = torch.rand(x.shape[:3], device=x.device) < self.config.parent_ignoring
            n = torch.where(drop[..., None], torch.ones_like(n), n)
        sel = head_mask(self.config.heads, self.heads, x.device)
        scaled = torch.where(sel, x * n, x) if sel is not None else x * n
        if mask is not None:
            scaled = scaled + mask
        probs = softmax(scaled)
        ctx.report(probs)
        return apply(probs, v, ctx.dropout, ctx.dropout > 0)
