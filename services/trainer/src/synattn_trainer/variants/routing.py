"""Routing-by-agreement instead of W^O, simple or EM (Li et al. 2021;
docs/papers/diversity.md, "Routing-by-agreement")."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.dropout import Dropout
from synattn_trainer.variant_options import RoutingConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register


def squash(s: Tensor) -> Tensor:
    """``|s|^2 / (1 + |s|^2) * s / sqrt(|s|^2 + 1e-9)`` over the last axis."""
    n2 = s.pow(2).sum(-1, keepdim=True)
    return n2 / (1 + n2) * s / (n2 + 1e-9).sqrt()


def simple_routing(votes: Tensor, iterations: int = 3, softmax_over: str = "outputs") -> Tensor:
    """Dynamic routing (Sabour et al.). ``votes`` ``[..., H, N, Dc]`` -> ``[..., N, Dc]``."""
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
    """EM routing (Hinton et al. 2018): votes ``[..., H, N, Dc]`` -> ``A mu``."""
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
    """``U = ReLU(LayerNorm(O) W_f)``, votes ``U W_v`` ``[H, N, d/N]``, routing; the routed
    output goes into the residual as it is (docs/papers/diversity.md, "Decisions": the public
    code's pre-processing LayerNorm, no vote dropout). That keeps the branch at the scale of a
    ``W^O`` output at initialisation; ``output_layernorm`` restores the earlier placement
    (dropout on ``U``, LayerNorm on the output), whose unit-RMS branch starts several times
    larger."""

    config: RoutingConfig

    replaces_out_proj = True

    def __init__(
        self, config: RoutingConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        d = model.d_model
        self.n_out = d // config.capsule_dim
        self.transform = nn.Linear(d, d)
        self.votes = nn.Linear(d, self.heads * d)
        # the vote network has no dropout (public code: relu_dropout = 0); the old placement had
        self.drop = Dropout(model.dropout if config.output_layernorm else 0.0)
        self.norm = nn.LayerNorm(d)  # on the input, or on the output with output_layernorm
        if config.method == "em":
            self.beta_a = nn.Parameter(torch.zeros(self.n_out))
            self.beta_mu = nn.Parameter(torch.zeros(self.n_out))

    def aggregate(self, heads: Tensor, out_proj: nn.Linear, ctx: AttnContext) -> Tensor | None:
        b, h, t, dh = heads.shape
        concat = heads.transpose(1, 2).reshape(b, t, h * dh)
        c = self.config
        if not c.output_layernorm:
            concat = self.norm(concat)
        u = self.drop(F.relu(self.transform(concat)))
        votes = self.votes(u).float().view(b, t, h, self.n_out, c.capsule_dim)
        if c.method == "simple":
            out = simple_routing(votes, c.iterations, c.softmax_over)
        else:
            out = em_routing(
                votes, self.beta_a.float(), self.beta_mu.float(), c.iterations,
                c.lambda_min, c.lambda_max, c.em_use_activation,
            )  # fmt: skip
        result: Tensor = out.reshape(b, t, h * dh).to(heads.dtype)
        return self.norm(result) if c.output_layernorm else result
