"""Localness: Yang et al.'s Gaussian bias on a predicted window
(docs/papers/index.md, "Localness")."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import LocalnessConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register


@register("localness", LocalnessConfig)
class Localness(AttentionVariant):
    """``G_ij = -(j - P_i)^2 / (2 sigma_i^2)``, ``sigma = D / 2``, ``[P, D] = I sigmoid(.)``."""

    config: LocalnessConfig

    def __init__(
        self, config: LocalnessConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.w_p = nn.Linear(self.d_head, self.d_head, bias=False)
        self.u_p = nn.Parameter(torch.randn(self.d_head) * self.d_head**-0.5)
        self.u_d = nn.Parameter(torch.randn(self.d_head) * self.d_head**-0.5)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        hidden = torch.tanh(self.w_p(q))  # [B, H, Tq, Dh]
        p, z = hidden @ self.u_p, hidden @ self.u_d
        tk = k.shape[2]
        if ctx.key_padding is not None:
            length = (~ctx.key_padding).sum(-1).float()[:, None, None]  # I: real keys
        else:
            length = torch.full((q.shape[0], 1, 1), float(tk), device=q.device)
        centre = length * torch.sigmoid(p)
        sigma = length * torch.sigmoid(z) / 2
        j = torch.arange(tk, device=q.device, dtype=torch.float32)
        return -((j - centre[..., None]) ** 2) / (2 * sigma[..., None] ** 2)
