"""Fixed encoder self-attention patterns, token- or word-based (Raganato et al. 2020;
docs/papers/fixed-patterns.md)."""

from __future__ import annotations

import torch
from torch import Tensor

from synattn_shared.requests import FeatureRequest
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.dropout import dropout
from synattn_trainer.patterns import FixedPattern
from synattn_trainer.variant_options import FixedConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import apply, logits_of, softmax


@register("fixed", FixedConfig)
class Fixed(AttentionVariant):
    config: FixedConfig

    def __init__(
        self, config: FixedConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)

    def requests(self) -> tuple[FeatureRequest, ...]:
        return tuple(FixedPattern(i, self.config.word_based) for i in range(self.config.fixed))

    def patterns(self, ctx: AttnContext) -> Tensor:
        """``[B, F, T, T]`` patterns of the batch (zero rows and columns at padding), stacked
        from the batch's host-built features."""
        return torch.stack([ctx.syntax[r] for r in self.requests()], 1)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        f = self.config.fixed
        key = ("fixed", self.config.word_based, f)  # built once per forward, shared by layers
        if key not in ctx.memo:
            ctx.memo[key] = self.patterns(ctx)
        p = ctx.memo[key].to(v.dtype)
        drop = ctx.dropout if self.config.dropout_on_fixed else 0.0
        fixed = dropout(p, drop, drop > 0) @ v[:, :f]
        if f == self.heads:
            ctx.report(p)
            return fixed
        learned_p = softmax(logits_of(q[:, f:], k[:, f:], mask))
        if ctx.keep_probs:
            ctx.report(torch.cat([p.to(learned_p.dtype), learned_p], 1))
        learned = apply(learned_p, v[:, f:], ctx.dropout, ctx.dropout > 0)
        return torch.cat([fixed, learned], 1)

    test_ablate: tuple[int, ...] = ()  # heads switched off at test time (never saved)

    def head_outputs(self, heads: Tensor, ctx: AttnContext) -> Tensor:
        """Ablation (the paper's test-time ablation): the config's ``ablate`` acts always,
        training included; ``test_ablate`` (``synattn translate --ablate``) only in eval mode."""
        off = set(self.config.ablate) | (set() if self.training else set(self.test_ablate))
        if not off:
            return heads
        gate = torch.ones(self.heads, device=heads.device, dtype=heads.dtype)
        gate[sorted(off)] = 0
        return heads * gate[None, :, None, None]
