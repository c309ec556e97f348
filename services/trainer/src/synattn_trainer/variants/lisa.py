"""LISA: a head supervised towards each token's parent (Strubell et al. 2018;
docs/papers/index.md, "LISA")."""

from __future__ import annotations

import torch
from torch import Tensor

from synattn_shared.requests import FeatureRequest, LisaTarget
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import LisaConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register


@register("lisa", LisaConfig)
class Lisa(AttentionVariant):
    config: LisaConfig

    def __init__(
        self, config: LisaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self._loss: Tensor | None = None

    def requests(self) -> tuple[FeatureRequest, ...]:
        return (LisaTarget(),)

    def needs_probs(self, ctx: AttnContext) -> bool:
        return self.training

    def observe(self, probs: Tensor, ctx: AttnContext) -> None:
        a = probs[:, self.config.head].float()  # [B, T, T]
        given = ctx.syntax[LisaTarget()].long()  # -1: the row has no parse
        real = (
            torch.ones_like(given, dtype=torch.bool)
            if ctx.query_padding is None
            else ~ctx.query_padding
        ) & given.ge(0)
        target = given.clamp(min=0)
        if self.config.loss == "l2":
            # not F.one_hot: its class count would pin the source length in a compiled graph
            keys = torch.arange(a.shape[-1], device=a.device)
            onehot = (target[..., None] == keys).float()
            per_row = ((a - onehot) ** 2).sum(-1)
        else:
            per_row = -torch.log(a.gather(-1, target[..., None]).squeeze(-1).clamp(min=1e-9))
        self._loss = self.config.weight * (per_row * real).sum()

    def aux_loss(self) -> Tensor | None:
        loss, self._loss = self._loss, None
        return loss
