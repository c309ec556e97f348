"""Syntax-guided variants (METHODS-syntax §2-4, §7; seeds 000 and 003) and their baselines.

Biases that depend only on the batch's syntax tensors (``dea``, ``lpea``, ``slr`` pure) go through
``logit_bias``, so the fused ``scaled_dot_product_attention`` kernel runs them. Variants that mix
two attentions or need probabilities (``rhe``, gated/averaged ``slr``, ``rel_pos``, ``lisa``,
``pascal``, ``sla``) use ``attend`` on the layers they are configured for only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn_shared.syntax.phrase import RP_OUT
from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import (
    DeaConfig,
    LisaConfig,
    LocalnessConfig,
    LpeaConfig,
    PascalConfig,
    RelPosConfig,
    RheConfig,
    SlaConfig,
    SlrConfig,
)
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import apply, head_mask, logits_of, on_heads, softmax


# --------------------------------------------------------------------------- DEA
@register("dea", DeaConfig)
class Dea(AttentionVariant):
    """``softmax(x + D)``, ``D = 0`` within one dependency arc, ``-inf`` elsewhere."""

    features = ("dea_bias",)

    def __init__(
        self, config: DeaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        head_mask(config.heads, model.heads, torch.device("cpu"))  # validates the head list

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        return on_heads(ctx.syntax["dea_bias"][:, None], self.config.heads, self.heads)


# --------------------------------------------------------------------------- LPEA
class PhrasalBias(nn.Module):
    """The LPEA parameters of one layer and the gather ``P_ij = beta[idx_ij]`` (never [T,T,Dh])."""

    def __init__(self, d_head: int, k: int, lp_outside: str) -> None:
        super().__init__()
        self.k = k
        self.lp_outside = lp_outside
        rows = 2 * k + 2 if lp_outside == "extra_index" else 2 * k + 1
        self.table = nn.Parameter(torch.randn(rows, d_head) * d_head**-0.5)
        self.proj = nn.Linear(d_head, d_head)
        self.u = nn.Parameter(torch.randn(d_head) * d_head**-0.5)

    def beta(self) -> Tensor:
        """``beta_r = -|tanh(W_P w_r + b_P) . U_P|`` for every index row."""
        return -(torch.tanh(self.proj(self.table)) @ self.u).abs()

    def forward(self, rp: Tensor) -> Tensor:
        """``[B, 1, T, T]`` bias from the RP matrix (``RP_OUT`` marks pairs outside the phrase)."""
        rp = rp.long()
        out = rp.eq(RP_OUT)
        idx = rp.clamp(-self.k, self.k) + self.k
        if self.lp_outside == "extra_index":
            idx = torch.where(out, torch.full_like(idx, 2 * self.k + 1), idx)
        bias = self.beta()[idx]
        if self.lp_outside == "mask":
            bias = bias.masked_fill(out, -math.inf)
        return bias[:, None]


@register("lpea", LpeaConfig)
class Lpea(AttentionVariant):
    features = ("rp",)

    def __init__(
        self, config: LpeaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.phrasal = PhrasalBias(self.d_head, config.k, config.lp_outside)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        return on_heads(self.phrasal(ctx.syntax["rp"]), self.config.heads, self.heads)


# --------------------------------------------------------------------------- baselines
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


@register("localness", LocalnessConfig)
class Localness(AttentionVariant):
    """``G_ij = -(j - P_i)^2 / (2 sigma_i^2)``, ``sigma = D / 2``, ``[P, D] = I sigmoid(.)``."""

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


# --------------------------------------------------------------------------- SLR (seed 003)
class SlrGate(nn.Module):
    """``G = sigmoid(BatchNorm(W2 LayerNorm(ReLU(W1 maxpool(H) + b1)) + b2))``, one per head."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.fc2 = nn.Linear(d_model, heads)
        self.bn = nn.BatchNorm1d(heads)

    def forward(self, h: Tensor, padding: Tensor | None) -> Tensor:
        if padding is not None:
            h = h.masked_fill(padding[..., None], -math.inf)
        pooled = h.max(1).values  # [B, D]
        o = self.fc2(self.norm(F.relu(self.fc1(pooled))))
        if self.training and o.shape[0] == 1:  # BatchNorm needs two sentences to normalise
            o = F.batch_norm(
                o, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias
            )
        else:
            o = self.bn(o)
        return torch.sigmoid(o)


@register("slr", SlrConfig)
class Slr(AttentionVariant):
    """``pure``: ``softmax(x + log m)`` on every head; ``avg``/``gated``: per head
    ``A = A_raw + G (A_syn - A_raw)`` with ``G = 0.5`` or the gate network (seed 003)."""

    features = ("slr_bias",)

    def __init__(
        self, config: SlrConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.gate = SlrGate(model.d_model, model.heads) if config.mode == "gated" else None
        self.last_gate: Tensor | None = None

    def feature_options(self) -> dict[str, float]:
        return {"tau": self.config.tau}

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        if self.config.mode != "pure":
            return None
        return on_heads(ctx.syntax["slr_bias"][:, None], self.config.heads, self.heads)

    def frozen(self, state: dict[str, int]) -> bool:
        """Pre-warm-up (seed 003 §4): the gate network takes no gradient for the first
        ``prewarm_epochs`` epochs or ``prewarm_fraction`` of the planned updates."""
        c = self.config
        if state.get("epoch", 0) < c.prewarm_epochs:
            return True
        planned = state.get("max_updates", 0)
        return bool(c.prewarm_fraction and state.get("update", 0) < c.prewarm_fraction * planned)

    def gate_values(self, ctx: AttnContext) -> Tensor:
        """``[B, H]`` gate per sentence and head (0 on heads that take no syntax)."""
        b = ctx.layer_input.shape[0] if ctx.layer_input is not None else 1
        device = ctx.syntax["slr_bias"].device
        if self.gate is None:
            g = torch.full((b, self.heads), 0.5, device=device)
        else:
            assert ctx.layer_input is not None
            if self.training and self.frozen(ctx.state):
                with torch.no_grad():
                    g = self.gate(ctx.layer_input, ctx.query_padding)
            else:
                g = self.gate(ctx.layer_input, ctx.query_padding)
        sel = head_mask(self.config.heads, self.heads, device)
        return g if sel is None else g * sel[0, :, 0, 0].to(g.dtype)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        if self.config.mode == "pure":
            return None
        x = logits_of(q, k, mask)
        raw = softmax(x)
        syn = softmax(x + ctx.syntax["slr_bias"][:, None])
        if self.training and self.config.ignore_p > 0:
            syn = F.dropout(syn, self.config.ignore_p)
        g = self.gate_values(ctx)
        self.last_gate = g.detach()
        probs = raw + g[:, :, None, None] * (syn - raw)
        ctx.report(probs)
        return apply(probs, v, ctx.dropout, ctx.dropout > 0)

    def stats(self) -> dict[str, float]:
        if self.last_gate is None:
            return {}
        means = self.last_gate.float().mean(0).tolist()
        return {f"gate.h{h}": round(m, 5) for h, m in enumerate(means)}


# --------------------------------------------------------------------------- RHE (seed 000)
def head_measures(
    probs: Tensor, related: Tensor, query: Tensor, key: Tensor
) -> tuple[Tensor, Tensor]:
    """``h_conf`` and ``Syn_attn`` per sentence and head (``[B, H]``, detached; §3.2).

    Args:
        probs: ``[B, H, T, T]`` plain attention (no syntactic bias).
        related: ``[B, T, T]`` True where ``dep_hops <= 1``.
        query: ``[B, T]`` True for real queries other than ``</s>``.
        key: ``[B, T]`` True for real keys (``</s>`` included).
    """
    a = probs.detach().float()
    q = query[:, None, :].float()
    nq = q.sum(-1).clamp(min=1)
    conf = a.masked_fill(~key[:, None, None, :], -1.0).max(-1).values
    h_conf = (conf * q).sum(-1) / nq
    syn = (a * (related & key[:, None, :])[:, None].float()).sum(-1)
    syn_attn = (syn * q).sum(-1) / nq
    return h_conf, syn_attn


@register("rhe", RheConfig)
class Rhe(AttentionVariant):
    """Per sentence and head: the plain attention if the head is important
    (``Syn_attn > sigmoid(h_conf)``), else the syntax-enlivened one (or zero when pruning)."""

    def __init__(
        self, config: RheConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.phrasal = (
            PhrasalBias(self.d_head, config.k, config.lp_outside) if config.sea == "lpea" else None
        )
        self.last_labels: Tensor | None = None

    @property
    def features(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("dea_mask", "rp") if self.config.sea == "lpea" else ("dea_mask", "dea_bias")

    def labels(self, probs: Tensor, ctx: AttnContext) -> Tensor:
        """``[B, H]`` True for important heads."""
        b, _, t, _ = probs.shape
        real = (
            torch.ones(b, t, dtype=torch.bool, device=probs.device)
            if ctx.key_padding is None
            else ~ctx.key_padding
        )
        query = real & ~ctx.syntax["src_eos"]
        h_conf, syn_attn = head_measures(probs, ctx.syntax["dea_mask"], query, real)
        gate = (
            torch.sigmoid(h_conf)
            if self.config.gate == "dynamic"
            else torch.full_like(h_conf, self.config.f_gate)
        )
        return syn_attn > gate

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        x = logits_of(q, k, mask)  # the peers' biases (Rel_Pos a^K, Localness G) are in mask
        plain = softmax(x)
        important = self.labels(plain, ctx)
        self.last_labels = important.detach()
        keep = important[:, :, None, None]
        out = self._values(plain, v, ctx)
        if self.config.mode == "prune":
            ctx.report(torch.where(keep, plain, torch.zeros_like(plain)))
            return torch.where(keep, out, torch.zeros_like(out))
        sea = (
            ctx.syntax["dea_bias"][:, None]
            if self.phrasal is None
            else self.phrasal(ctx.syntax["rp"])
        )
        lively = softmax(x + sea)
        ctx.report(torch.where(keep, plain, lively))
        enlivened = self._values(lively, v, ctx)
        return torch.where(keep, out, enlivened)

    def _values(self, probs: Tensor, v: Tensor, ctx: AttnContext) -> Tensor:
        dropped = F.dropout(probs, ctx.dropout, ctx.dropout > 0)
        out = dropped.to(v.dtype) @ v
        term = None if ctx.value_term is None else ctx.value_term(dropped)  # Rel_Pos a^V
        return out if term is None else out + term.to(out.dtype)

    def stats(self) -> dict[str, float]:
        if self.last_labels is None:
            return {}
        share = self.last_labels.float().mean(0).tolist()
        return {f"important.h{h}": round(s, 4) for h, s in enumerate(share)}


# --------------------------------------------------------------------------- LISA, PASCAL, SLA
@register("lisa", LisaConfig)
class Lisa(AttentionVariant):
    features = ("lisa_target",)

    def __init__(
        self, config: LisaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self._loss: Tensor | None = None

    def needs_probs(self, ctx: AttnContext) -> bool:
        return self.training

    def observe(self, probs: Tensor, ctx: AttnContext) -> None:
        a = probs[:, self.config.head].float()  # [B, T, T]
        given = ctx.syntax["lisa_target"].long()  # -1: the row has no parse
        real = (
            torch.ones_like(given, dtype=torch.bool)
            if ctx.query_padding is None
            else ~ctx.query_padding
        ) & given.ge(0)
        target = given.clamp(min=0)
        if self.config.loss == "l2":
            onehot = F.one_hot(target, a.shape[-1]).float()
            per_row = ((a - onehot) ** 2).sum(-1)
        else:
            per_row = -torch.log(a.gather(-1, target[..., None]).squeeze(-1).clamp(min=1e-9))
        self._loss = self.config.weight * (per_row * real).sum()

    def aux_loss(self) -> Tensor | None:
        loss, self._loss = self._loss, None
        return loss


@register("pascal", PascalConfig)
class Pascal(AttentionVariant):
    features = ("pascal_centre",)

    def __init__(
        self, config: PascalConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        head_mask(config.heads, model.heads, torch.device("cpu"))

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
        n = self.density(ctx.syntax["pascal_centre"], k.shape[2])[:, None].expand_as(x)
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


@register("sla", SlaConfig)
class Sla(AttentionVariant):
    features = ("sla_keep",)

    def __init__(
        self, config: SlaConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__(config, model, kind, layer)
        self.gate = nn.Linear(model.d_model, 1 if config.gate == "token" else model.heads)
        self.last_gate: Tensor | None = None

    def feature_options(self) -> dict[str, object]:
        c = self.config
        return {
            "sla_m": c.m,
            "sla_neighbour_union": c.neighbour_union,
            "sla_punct_visible": c.punct_visible,
        }

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        assert ctx.layer_input is not None
        x = logits_of(q, k, mask)
        local_bias = torch.zeros_like(ctx.syntax["sla_keep"], dtype=x.dtype).masked_fill(
            ~ctx.syntax["sla_keep"], -math.inf
        )
        local_p, glob_p = softmax(x + local_bias[:, None]), softmax(x)
        local = apply(local_p, v, ctx.dropout, ctx.dropout > 0)
        glob = apply(glob_p, v, ctx.dropout, ctx.dropout > 0)
        g = torch.sigmoid(self.gate(ctx.layer_input))  # [B, T, 1|H]
        self.last_gate = g.detach()
        g = g.transpose(1, 2)[..., None]  # [B, 1|H, T, 1]
        ctx.report(glob_p + g.to(glob_p.dtype) * (local_p - glob_p))  # the mix, as applied
        return glob + g * (local - glob)

    def stats(self) -> dict[str, float]:
        return (
            {} if self.last_gate is None else {"gate.mean": round(float(self.last_gate.mean()), 5)}
        )
