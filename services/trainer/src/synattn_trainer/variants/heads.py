"""Head-level variants (METHODS-heads §1, §3, §4; seeds 001 and 004): fixed patterns,
disagreement regularisation, routing-by-agreement aggregation."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.patterns import token_patterns, word_patterns
from synattn_trainer.variant_options import DisagreementConfig, FixedConfig, RoutingConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import apply, logits_of, softmax


# --------------------------------------------------------------------------- fixed patterns
@register("fixed", FixedConfig)
class Fixed(AttentionVariant):
    def __init__(
        self, config: FixedConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)

    @property
    def features(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("word_ids",) if self.config.word_based else ()

    def patterns(self, ctx: AttnContext, t: int, device: torch.device) -> Tensor:
        """``[B, F, T, T]`` patterns of the batch (zero rows and columns at padding)."""
        f = self.config.fixed
        pad = ctx.key_padding
        b = pad.shape[0] if pad is not None else 1
        out = np.zeros((b, f, t, t), dtype=np.float32)
        for s in range(b):
            n = int((~pad[s]).sum()) if pad is not None else t
            if self.config.word_based:
                ids = ctx.syntax["word_ids"][s, :n].cpu().numpy()
                p = word_patterns(ids)
            else:
                p = token_patterns(n)
            out[s, :, :n, :n] = p[:f]
        return torch.from_numpy(out).to(device)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        f = self.config.fixed
        key = f"_fixed:{self.config.word_based}:{f}"  # built once per forward, shared by layers
        if key not in ctx.syntax:
            ctx.syntax[key] = self.patterns(ctx, k.shape[2], v.device)
        p = ctx.syntax[key].to(v.dtype)
        drop = ctx.dropout if self.config.dropout_on_fixed else 0.0
        fixed = F.dropout(p, drop, drop > 0) @ v[:, :f]
        if f == self.heads:
            ctx.report(p)
            return fixed
        learned_p = softmax(logits_of(q[:, f:], k[:, f:], mask))
        if ctx.keep_probs:
            ctx.report(torch.cat([p.to(learned_p.dtype), learned_p], 1))
        learned = apply(learned_p, v[:, f:], ctx.dropout, ctx.dropout > 0)
        return torch.cat([fixed, learned], 1)

    def head_outputs(self, heads: Tensor, ctx: AttnContext) -> Tensor:
        if not self.config.ablate:
            return heads
        gate = torch.ones(self.heads, device=heads.device, dtype=heads.dtype)
        gate[self.config.ablate] = 0
        return heads * gate[None, :, None, None]


# --------------------------------------------------------------------------- disagreement
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

    def __init__(
        self, config: DisagreementConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.layers_of_type = 1
        self.similarity: Tensor | None = None
        self._state: dict[str, int] = {}

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
        # the trainer divides aux losses by the target tokens: per-token-mean form (§3.1)
        tokens = self._state.get("target_tokens", 1)
        return self.config.weight * sim / self.layers_of_type * tokens


# --------------------------------------------------------------------------- routing
def squash(s: Tensor) -> Tensor:
    """``|s|^2 / (1 + |s|^2) * s / sqrt(|s|^2 + 1e-9)`` over the last axis."""
    n2 = s.pow(2).sum(-1, keepdim=True)
    return n2 / (1 + n2) * s / (n2 + 1e-9).sqrt()


def simple_routing(votes: Tensor, iterations: int = 3, softmax_over: str = "outputs") -> Tensor:
    """Dynamic routing (Sabour et al.; §4.3). ``votes`` ``[..., H, N, Dc]`` -> ``[..., N, Dc]``."""
    logits = torch.zeros(votes.shape[:-1], device=votes.device, dtype=votes.dtype)
    out = votes.new_zeros(votes.shape[:-3] + votes.shape[-2:])
    for t in range(iterations):
        if softmax_over == "outputs":
            c = torch.softmax(logits, -1)
            s = (c[..., None] * votes).sum(-3) / c.sum(-2)[..., None]
        else:
            c = torch.softmax(logits, -2)
            s = (c[..., None] * votes).sum(-3)
        out = squash(s)
        if t < iterations - 1:
            logits = logits + (out[..., None, :, :] * votes).sum(-1)
    return out


def em_routing(
    votes: Tensor,
    beta_a: Tensor,
    beta_mu: Tensor,
    iterations: int = 3,
    lambda_min: float = 1.0,
    lambda_max: float = 3.0,
    use_activation: bool = True,
    eps: float = 1e-9,
    eps_var: float = 1e-6,
) -> Tensor:
    """EM routing (Hinton et al. 2018; §4.4): votes ``[..., H, N, Dc]`` -> ``A mu``."""
    n = votes.shape[-2]
    c = torch.full(votes.shape[:-1], 1.0 / n, device=votes.device, dtype=votes.dtype)
    log2pi = math.log(2 * math.pi)
    mu = act = None
    for t in range(iterations):
        lam = lambda_min + (lambda_max - lambda_min) * t / max(1, iterations - 1)
        r = c.sum(-2)  # [..., N]
        mu = (c[..., None] * votes).sum(-3) / (r[..., None] + eps)
        var = (c[..., None] * (votes - mu[..., None, :, :]) ** 2).sum(-3) / (
            r[..., None] + eps
        ) + eps_var
        chi = r * (0.5 * var.log() + 0.5 * (1 + log2pi)).sum(-1)
        logit = lam * (beta_a - beta_mu * r - chi)
        act = torch.sigmoid(logit)
        if t < iterations - 1:
            diff = votes - mu[..., None, :, :]
            log_p = (
                -(diff**2) / (2 * var[..., None, :, :])
                - 0.5 * (log2pi + var[..., None, :, :].log())
            ).sum(-1)
            log_a = -F.softplus(-logit)
            c = torch.softmax((log_a[..., None, :] + log_p) if use_activation else log_p, -1)
    assert mu is not None and act is not None
    return act[..., None] * mu if use_activation else mu


@register("routing", RoutingConfig)
class Routing(AttentionVariant):
    """``U = Dropout(ReLU(O W_f))``, votes ``U W_v`` ``[H, N, d/N]``, routing, LayerNorm."""

    replaces_out_proj = True

    def __init__(
        self, config: RoutingConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        d = model.d_model
        self.n_out = d // config.capsule_dim
        self.transform = nn.Linear(d, d)
        self.votes = nn.Linear(d, self.heads * d)
        self.drop = nn.Dropout(model.dropout)
        self.norm = nn.LayerNorm(d)
        if config.method == "em":
            self.beta_a = nn.Parameter(torch.zeros(self.n_out))
            self.beta_mu = nn.Parameter(torch.zeros(self.n_out))

    def aggregate(self, heads: Tensor, out_proj: nn.Linear, ctx: AttnContext) -> Tensor | None:
        b, h, t, dh = heads.shape
        concat = heads.transpose(1, 2).reshape(b, t, h * dh)
        u = self.drop(F.relu(self.transform(concat)))
        votes = self.votes(u).float().view(b, t, h, self.n_out, self.config.capsule_dim)
        c = self.config
        if c.method == "simple":
            out = simple_routing(votes, c.iterations, c.softmax_over)
        else:
            out = em_routing(
                votes, self.beta_a.float(), self.beta_mu.float(), c.iterations,
                c.lambda_min, c.lambda_max, c.em_use_activation,
            )  # fmt: skip
        return self.norm(out.reshape(b, t, h * dh).to(heads.dtype))
