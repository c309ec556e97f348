"""The ``distance_decay`` variant: a bias on the logits, the first hook of the attention
(``synattn_trainer.variants.base``); padding, causality and analysis are the attention's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn_distance_decay import DistanceDecayConfig
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variants import AttentionVariant, AttnContext
from synattn_trainer.variants.common import on_heads


class DistanceDecay(AttentionVariant):
    """``-softplus(w_h) * |i - j|`` on head ``h``'s logits; ``w_h`` starts where softplus gives
    ALiBi's slope ``2^(-8 (h + 1) / H)``."""

    config: DistanceDecayConfig

    def __init__(
        self, config: DistanceDecayConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        slopes = torch.tensor([2 ** (-8 * (h + 1) / self.heads) for h in range(self.heads)])
        raw = torch.log(torch.expm1(slopes))  # softplus(raw) = slopes
        if config.learn:
            self.raw_slope = nn.Parameter(raw)
        else:
            self.register_buffer("raw_slope", raw)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        tq, tk = q.shape[2], k.shape[2]
        # the queries are the last tq positions (one, decoding step by step)
        i = torch.arange(tk - tq, tk, device=q.device)
        j = torch.arange(tk, device=q.device)
        distance = (i[:, None] - j[None, :]).abs().float()
        if self.config.max_distance:
            distance = distance.clamp(max=self.config.max_distance)
        slope = F.softplus(self.raw_slope.float())
        bias = -(slope[:, None, None] * distance)[None]  # [1, H, Tq, Tk]
        return on_heads(bias, self.config.heads, self.heads)

    def stats(self) -> dict[str, float]:
        slope = F.softplus(self.raw_slope.detach().float())
        return {f"slope.h{h}": round(float(s), 5) for h, s in enumerate(slope)}
