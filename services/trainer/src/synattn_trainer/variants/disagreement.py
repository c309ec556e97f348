"""Disagreement regularisation: subspace, position or output term (Li et al. 2021;
docs/papers/diversity.md)."""

from __future__ import annotations

import torch
from torch import Tensor

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import DisagreementConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, Progress, register


def unit(x: Tensor) -> Tensor:
    """``x / sqrt(max(|x|^2, 1e-12))`` along the last axis (zero vectors stay zero)."""
    return x / x.pow(2).sum(-1, keepdim=True).clamp(min=1e-12).sqrt()


def cosine_similarity_term(vectors: Tensor, include_diagonal: bool = True) -> Tensor:
    """``(1/H^2) sum_ij cos(x^i, x^j)`` per position: ``[B, H, T, d]`` -> ``[B, T]``."""
    h = vectors.shape[1]
    u = unit(vectors.float())
    total = u.sum(1).pow(2).sum(-1)
    if include_diagonal:
        return total / (h * h)
    return (total - u.pow(2).sum(-1).sum(1)) / (h * (h - 1))


def position_term(probs: Tensor, include_diagonal: bool = True) -> Tensor:
    """``(1/H^2) sum_ij sum_k A^i A^j`` per query: ``[B, H, Tq, Tk]`` -> ``[B, Tq]``."""
    h = probs.shape[1]
    a = probs.float()
    total = a.sum(1).pow(2).sum(-1)
    if include_diagonal:
        return total / (h * h)
    return (total - a.pow(2).sum(-1).sum(1)) / (h * (h - 1))


def masked_mean(values: Tensor, valid: Tensor) -> Tensor:
    """Token-weighted mean over the valid positions of a batch."""
    w = valid.float()
    return (values * w).sum() / w.sum().clamp(min=1)


@register("disagreement", DisagreementConfig)
class Disagreement(AttentionVariant):
    """Adds ``lambda * mean over this type's layers of S`` per target token to the loss."""

    config: DisagreementConfig

    def __init__(
        self, config: DisagreementConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.layers_of_type = 1
        self.similarity: Tensor | None = None
        self._state = Progress()

    def bind(self, peers: list[AttentionVariant]) -> None:
        self.layers_of_type = sum(
            1 for p in peers if isinstance(p, Disagreement) and p.kind == self.kind
        )

    def _valid(self, padding: Tensor | None, like: Tensor) -> Tensor:
        return (
            torch.ones(like.shape[0], like.shape[-1], dtype=torch.bool, device=like.device)
            if padding is None
            else ~padding
        )

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        self._state = ctx.state
        if self.training and self.config.term == "subspace":
            s = cosine_similarity_term(v, self.config.include_diagonal)
            self.similarity = masked_mean(s, self._valid(ctx.key_padding, s))
        return None

    def needs_probs(self, ctx: AttnContext) -> bool:
        return self.training and self.config.term == "position"

    def observe(self, probs: Tensor, ctx: AttnContext) -> None:
        if self.config.term == "position":
            s = position_term(probs, self.config.include_diagonal)
            self.similarity = masked_mean(s, self._valid(ctx.query_padding, s))

    def head_outputs(self, heads: Tensor, ctx: AttnContext) -> Tensor:
        if self.training and self.config.term == "output":
            s = cosine_similarity_term(heads, self.config.include_diagonal)
            self.similarity = masked_mean(s, self._valid(ctx.query_padding, s))
        return heads

    def aux_loss(self) -> Tensor | None:
        sim, self.similarity = self.similarity, None
        if sim is None:
            return None
        # the trainer divides aux losses by the target tokens: per-token-mean form
        tokens = self._state.target_tokens
        return self.config.weight * sim / self.layers_of_type * tokens
