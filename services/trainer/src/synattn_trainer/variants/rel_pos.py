"""Rel_Pos: Shaw et al.'s relative positions, key and value terms (docs/papers/index.md,
"Rel_Pos")."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import RelPosConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register


def shaw_index(tq: int, tk: int, k: int, device: torch.device) -> Tensor:
    """``clip(j - i, k) + k`` for queries ``i`` (the last ``tq`` positions) and keys ``j``."""
    i = torch.arange(tk - tq, tk, device=device)[:, None]
    j = torch.arange(tk, device=device)[None, :]
    return (j - i).clamp(-k, k) + k


class RelPositions(nn.Module):
    def __init__(self, d_head: int, k: int, values: bool) -> None:
        super().__init__()
        self.k = k
        self.key = nn.Parameter(torch.randn(2 * k + 1, d_head) * d_head**-0.5)
        self.value = (
            nn.Parameter(torch.randn(2 * k + 1, d_head) * d_head**-0.5) if values else None
        )

    def bias(self, q: Tensor, tk: int) -> Tensor:
        """``q_i . a^K_ij / sqrt(Dh)`` by gathering ``q . omega^K_r`` (``[B, H, Tq, 2k+1]``)."""
        idx = shaw_index(q.shape[2], tk, self.k, q.device)
        qk = (q @ self.key.T).float() / math.sqrt(q.shape[-1])
        return qk.gather(-1, idx.expand(q.shape[0], q.shape[1], -1, -1))

    def value_term(self, probs: Tensor) -> Tensor | None:
        """``sum_j A_ij a^V_ij``: probabilities summed per relative index, times ``omega^V``."""
        if self.value is None:
            return None
        b, h, tq, tk = probs.shape
        idx = shaw_index(tq, tk, self.k, probs.device).expand(b, h, -1, -1)
        per_r = torch.zeros(b, h, tq, 2 * self.k + 1, device=probs.device, dtype=probs.dtype)
        per_r.scatter_add_(-1, idx, probs)
        return per_r.to(self.value.dtype) @ self.value


@register("rel_pos", RelPosConfig)
class RelPos(AttentionVariant):
    config: RelPosConfig

    def __init__(
        self, config: RelPosConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.rel = RelPositions(self.d_head, config.k, config.values)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        return self.rel.bias(q, k.shape[2])  # the key term a^K

    def needs_probs(self, ctx: AttnContext) -> bool:
        return self.rel.value is not None  # the value term needs them (key term only: fused)

    def values(self, probs: Tensor) -> Tensor | None:
        return self.rel.value_term(probs)  # the value term a^V, wherever attention is computed
