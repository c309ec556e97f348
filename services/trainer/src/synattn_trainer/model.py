"""Transformer encoder-decoder whose every attention module carries one variant (the extension
point in ``synattn_trainer.variants.base``). Vanilla attention runs through the fused
``scaled_dot_product_attention``; probabilities are materialised only when a variant asks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn_shared.requests import FeatureRequest
from synattn_trainer.config import AttentionType, ModelConfig, TrainConfig
from synattn_trainer.data import Features
from synattn_trainer.dropout import Dropout, dropout, fast_on
from synattn_trainer.tokenizer import EOS_ID, PAD_ID
from synattn_trainer.variants import (
    AttentionVariant,
    AttnContext,
    Composite,
    Progress,
    build_layer_variant,
)
from synattn_trainer.variants.headgate import HeadGates


def use_cudnn_attention(on: bool) -> None:
    """Whether SDPA may choose cuDNN's fused attention on CUDA, process-wide (torch's own switch;
    the trainer and ``load_model`` set it from ``train.cudnn_attention`` on a CUDA device).

    Off by default because cuDNN plans its kernel for each input shape, and a translation
    batch's shape changes every update. On an H100 (torch 2.11) at Transformer-base, the
    profiler put 253 ms of host time per vanilla update in cuDNN's attention, and with 8 loader
    processes ``dea`` ran at 0.84x of vanilla with it and 1.04x without (results/gpu/)."""
    torch.backends.cuda.enable_cudnn_sdp(on)


def combine_masks(
    key_padding: Tensor | None,
    causal: bool,
    bias: Tensor | None,
    tq: int,
    tk: int,
    device: torch.device,
) -> Tensor | None:
    """One additive float mask ``[B|1, H|1, Tq, Tk]``: padding and future keys are ``-inf``."""
    mask: Tensor | None = None
    # a batch without padding needs no mask on the CPU; elsewhere asking would make the host
    # wait for the device (and break a compiled graph), so the mask is always built there
    if key_padding is not None and (
        key_padding.device.type != "cpu" or torch.compiler.is_compiling()
        or bool(key_padding.any())
    ):  # fmt: skip
        mask = torch.zeros(key_padding.shape, device=device).masked_fill(key_padding, -math.inf)
        mask = mask[:, None, None, :]
    if causal:
        future = torch.ones(tq, tk, dtype=torch.bool, device=device).triu(tk - tq + 1)
        c = torch.zeros(tq, tk, device=device).masked_fill(future, -math.inf)
        mask = c if mask is None else mask + c
    if bias is not None:
        mask = bias if mask is None else mask + bias
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a variant hook at every step (see ``variants.base``)."""

    def __init__(self, cfg: ModelConfig, variant: AttentionVariant, causal: bool = False) -> None:
        super().__init__()
        self.h = cfg.heads
        self.d_head = cfg.d_model // cfg.heads
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.k_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.v_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.out_proj: nn.Linear | None = (
            None if variant.replaces_out_proj else nn.Linear(cfg.d_model, cfg.d_model)
        )
        self.dropout = cfg.attn_dropout
        self.causal = causal
        self.variant = variant
        # xi: docs/papers/headmask.md, "Head gates"
        self.head_gates = HeadGates(cfg, variant.kind, variant.layer)
        # the hooks called: the configured variant(s), then the head gates; not registered as
        # a submodule, so parameter names (and checkpoints) stay ``variant.*``
        self.hooks: AttentionVariant
        object.__setattr__(self, "hooks", Composite([variant, self.head_gates]))
        self._stacked: dict[str, tuple[Tensor, Tensor]] = {}  # see ``_fused``
        self.keep_probs = False  # analysis: store the last probabilities in ``last_probs``
        self.last_probs: Tensor | None = None

    @property
    def gate_offset(self) -> int:
        """This module's first global head index g (docs/papers/headmask.md, "Head gates")."""
        return self.head_gates.offset

    def _probs(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """Explicit softmax probabilities ``[B, H, Tq, Tk]`` of the default path."""
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)
        if mask is not None:
            logits = logits + mask
        return torch.softmax(logits.float(), dim=-1).to(q.dtype)

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_head).transpose(1, 2)

    def _project(self, x: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values ``[B, H, T, d_h]``. Self-attention makes all three with one
        matrix product (keys and values of cross-attention with one): fewer, larger products
        run faster, and the three ``nn.Linear`` (parameter names, checkpoints) stay as they are.
        """
        if memory is x:
            w, b = self._fused("qkv", (self.q_proj, self.k_proj, self.v_proj))
            q, k, v = F.linear(x, w, b).chunk(3, dim=-1)
            return self._split(q), self._split(k), self._split(v)
        w, b = self._fused("kv", (self.k_proj, self.v_proj))
        k, v = F.linear(memory, w, b).chunk(2, dim=-1)
        return self._split(self.q_proj(x)), self._split(k), self._split(v)

    def _fused(self, name: str, layers: tuple[nn.Linear, ...]) -> tuple[Tensor, Tensor]:
        """The layers' weights and biases stacked. In training the stacking is part of the
        graph (gradients flow to each layer). A decoding call (inference mode, one call per
        step) stacks once: ``Transformer.start_decoding`` empties the copies at its start, as
        the weights may have changed since (fused Adam does not bump version counters, so
        they cannot tell)."""
        decoding = not torch.compiler.is_compiling() and torch.is_inference_mode_enabled()
        hit = self._stacked.get(name) if decoding else None
        if hit is None:
            hit = (
                torch.cat([lin.weight for lin in layers]),
                torch.cat([lin.bias for lin in layers]),
            )
            if decoding:
                self._stacked[name] = hit
        return hit

    def _padding_mask(
        self, ctx: AttnContext, tq: int, tk: int, device: torch.device
    ) -> Tensor | None:
        """The padding (and causal) mask for ``tq`` queries over ``tk`` keys, built once per
        forward and shared by the layers (``ctx.masks``: within a forward each kind of
        attention has one shape, so the key needs no sizes, whose symbolic values would make a
        compiled forward recompile for every new shape)."""
        key = (ctx.kind, self.causal)  # one shape per kind within a forward
        if key not in ctx.masks:
            ctx.masks[key] = combine_masks(ctx.key_padding, self.causal, None, tq, tk, device)
        return ctx.masks[key]

    def _beams_to_source(
        self, x: Tensor, memory: Tensor, ctx: AttnContext, cache: dict[str, Tensor] | None
    ) -> Tensor:
        """Plain cross-attention of ``ctx.beam`` hypotheses per sentence (``x``: ``[n * beam,
        1, D]``) to their sentence's source (``memory``: ``[n, S, D]``): keys and values once per
        sentence, and a sentence's hypotheses attend together, one ``[beam, S]`` product per
        head instead of ``beam`` copies of the source (``Transformer.beams_share_source``)."""
        if cache is not None and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            w, b = self._fused("kv", (self.k_proj, self.v_proj))
            k, v = (self._split(t).contiguous() for t in F.linear(memory, w, b).chunk(2, dim=-1))
            if cache is not None:
                cache["k"], cache["v"] = k, v
        n, beam, s = k.shape[0], ctx.beam, k.shape[2]
        q = self.q_proj(x).view(n, beam, self.h, self.d_head).transpose(1, 2)  # [n, H, beam, dh]
        heads = self._probs(q, k, self._padding_mask(ctx, beam, s, x.device)) @ v  # [n,H,beam,dh]
        assert self.out_proj is not None
        out: Tensor = self.out_proj(heads.transpose(1, 2).reshape(n * beam, 1, -1))
        return out

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        ctx: AttnContext,
        cache: dict[str, Tensor] | None = None,
        static_kv: bool = False,
    ) -> Tensor:
        """Attend from ``x`` to ``memory``.

        ``cache`` (incremental decoding): self-attention appends this step's keys and values to
        the cached ones; with ``static_kv`` (cross-attention) they are computed once and reused.
        """
        if ctx.beam > 1:
            return self._beams_to_source(x, memory, ctx, cache)
        if cache is not None and static_kv and "k" in cache:
            q = self._split(self.q_proj(x))
            k, v = cache["k"], cache["v"]
        else:
            q, k, v = self._project(x, memory)
            if cache is not None:
                if not static_kv and "k" in cache:
                    k = torch.cat([cache["k"], k], 2)
                    v = torch.cat([cache["v"], v], 2)
                # contiguous once here, not copied by every later step's matrix products
                k, v = k.contiguous(), v.contiguous()
                cache["k"], cache["v"] = k, v
        ctx.layer_input = x
        p_drop = self.dropout if self.training else 0.0
        ctx.dropout = p_drop
        bias = self.hooks.logit_bias(q, k, ctx)
        tq, tk = q.shape[2], k.shape[2]
        mask = self._padding_mask(ctx, tq, tk, x.device)
        if bias is not None:
            mask = bias if mask is None else mask + bias
        # analysis never changes the path: the same computation runs, and reports what it did
        ctx.keep_probs, ctx.probs = self.keep_probs, None
        ctx.value_term = self.hooks.values
        replaced = self.hooks.attend(q, k, v, mask, ctx)
        if replaced is not None:
            heads = replaced
            if self.keep_probs:
                if ctx.probs is None:
                    raise RuntimeError(
                        f"variant {type(self.variant).__name__} replaced attention without "
                        "reporting its probabilities (ctx.report)"
                    )
                self.last_probs = ctx.probs
        elif self.hooks.needs_probs(ctx):
            probs = self._probs(q, k, mask)
            self.hooks.observe(probs, ctx)
            if self.keep_probs:
                self.last_probs = probs.detach()
            dropped = dropout(probs, p_drop, self.training)
            heads = dropped @ v
            term = self.hooks.values(dropped)
            if term is not None:
                heads = heads + term.to(heads.dtype)
        elif q.shape[2] == 1 or (p_drop > 0 and fast_on(q.device)):
            # one query (a decoding step): two small matrix products beat the fused kernel,
            # whose blocking is made for many queries (about 2x on the CPU, bench/peers/peer.py).
            # With dropout, SDPA on the CPU falls back to explicit attention anyway; the same
            # computation here takes the cheaper dropout mask (synattn_trainer.dropout).
            probs = self._probs(q, k, mask)
            if self.keep_probs:
                self.last_probs = probs.detach()
            heads = dropout(probs, p_drop) @ v
        else:
            if mask is not None and mask.dtype != q.dtype:
                # SDPA wants the mask in the query's dtype: torch 2.13 on CPU gives wrong results
                # for float64 queries with a float32 mask at T >= 16 (a test pins this)
                mask = mask.to(q.dtype)
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop)
            if self.keep_probs:  # exported beside the fused kernel, which still makes the output
                self.last_probs = self._probs(q, k, mask).detach()
        heads = self.hooks.head_outputs(heads, ctx)
        out = self.hooks.aggregate(heads, self.out_proj, ctx)  # type: ignore[arg-type]
        if out is None:
            assert self.out_proj is not None, "a variant without W^O returned no aggregation"
            b, _, t, _ = heads.shape
            out = self.out_proj(heads.transpose(1, 2).reshape(b, t, self.h * self.d_head))
        return out


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = Dropout(cfg.relu_dropout)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc2(self.dropout(F.relu(self.fc1(x))))
        return out


class Sublayer(nn.Module):
    """Residual + dropout + LayerNorm around a sub-layer, pre- or post-norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.dropout = Dropout(cfg.dropout)
        self.pre = cfg.norm == "pre"

    def forward(self, x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        out: Tensor
        if self.pre:
            out = x + self.dropout(fn(self.norm(x)))
        else:
            out = self.norm(x + self.dropout(fn(x)))
        return out


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TrainConfig, layer: int) -> None:
        super().__init__()
        m = cfg.model
        enc = m.encoder_view()  # the 1L baseline: one head of d_h = d (fixed patterns)
        variant = build_layer_variant(cfg.variants_for("enc_self", layer), enc, "enc_self", layer)
        self.self_attn = MultiHeadAttention(enc, variant)
        self.ffn = FeedForward(m)
        self.sub1, self.sub2 = Sublayer(m), Sublayer(m)

    def forward(self, x: Tensor, ctx: AttnContext) -> Tensor:
        x = self.sub1(x, lambda h: self.self_attn(h, h, ctx))
        out: Tensor = self.sub2(x, self.ffn)
        return out


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TrainConfig, layer: int) -> None:
        super().__init__()
        m = cfg.model
        self_v = build_layer_variant(cfg.variants_for("dec_self", layer), m, "dec_self", layer)
        cross_v = build_layer_variant(cfg.variants_for("enc_dec", layer), m, "enc_dec", layer)
        self.self_attn = MultiHeadAttention(m, self_v, causal=True)
        self.cross_attn = MultiHeadAttention(m, cross_v)
        self.ffn = FeedForward(m)
        self.sub1, self.sub2, self.sub3 = Sublayer(m), Sublayer(m), Sublayer(m)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_ctx: AttnContext,
        cross_ctx: AttnContext,
        cache: dict[str, dict[str, Tensor]] | None = None,
    ) -> Tensor:
        sc = None if cache is None else cache.setdefault("self", {})
        cc = None if cache is None else cache.setdefault("cross", {})
        y = self.sub1(y, lambda h: self.self_attn(h, h, self_ctx, sc))
        y = self.sub2(y, lambda h: self.cross_attn(h, memory, cross_ctx, cc, static_kv=True))
        out: Tensor = self.sub3(y, self.ffn)
        return out


def sinusoids(n: int, d: int) -> Tensor:
    """Sinusoidal position encodings ``[n, d]`` (Vaswani et al. 2017)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float32)
    angle = pos / torch.pow(10000.0, i / d)
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe


@dataclass
class Encoded:
    """Encoder output and what the decoder's cross-attention needs about the source."""

    memory: Tensor
    src_pad: Tensor
    src_eos: Tensor
    syntax: Features = field(default_factory=dict)


class Transformer(nn.Module):
    pe: Tensor  # sinusoidal positions (a buffer)

    """Encoder-decoder NMT model; ``forward`` returns logits ``[B, T, V]``."""

    def __init__(self, cfg: TrainConfig, vocab_size: int) -> None:
        super().__init__()
        m = cfg.model
        self.cfg = cfg
        self.d = m.d_model
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, m.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, 0.0, m.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[PAD_ID].zero_()
        if m.tie_embeddings:
            self.tgt_embed = self.embed
        else:
            self.tgt_embed = nn.Embedding(vocab_size, m.d_model, padding_idx=PAD_ID)
            nn.init.normal_(self.tgt_embed.weight, 0.0, m.d_model**-0.5)
        self.register_buffer("pe", sinusoids(m.max_positions, m.d_model), persistent=False)
        self.drop = Dropout(m.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg, i) for i in range(m.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg, i) for i in range(m.dec_layers))
        self.enc_norm = nn.LayerNorm(m.d_model) if m.final_norm else nn.Identity()
        self.dec_norm = nn.LayerNorm(m.d_model) if m.final_norm else nn.Identity()
        self.out_bias = nn.Parameter(torch.zeros(vocab_size)) if m.output_bias else None
        self.out_weight = (
            None if m.tie_embeddings else nn.Parameter(torch.empty(vocab_size, m.d_model))
        )
        if self.out_weight is not None:
            nn.init.normal_(self.out_weight, 0.0, m.d_model**-0.5)
        self.state = Progress()
        offset = 0
        for kind in ("enc_self", "dec_self", "enc_dec"):  # g = type, then layer, then head
            for k, _, mod in self.attention_modules():
                if k == kind:
                    mod.head_gates.offset = offset
                    offset += mod.h
        self.num_heads = offset
        peers = [p for _, _, m in self.attention_modules() for p in m.variant.members()]
        for variant in peers:
            variant.bind(peers)

    def attention_modules(self) -> list[tuple[AttentionType, int, MultiHeadAttention]]:
        """Every attention module with its type and layer."""
        mods: list[tuple[AttentionType, int, MultiHeadAttention]] = []
        for i, enc in enumerate(cast(list[EncoderLayer], self.encoder)):
            mods.append(("enc_self", i, enc.self_attn))
        for i, dec in enumerate(cast(list[DecoderLayer], self.decoder)):
            mods.append(("dec_self", i, dec.self_attn))
            mods.append(("enc_dec", i, dec.cross_attn))
        return mods

    def feature_requests(self) -> tuple[FeatureRequest, ...]:
        """The syntax features some variant of this model needs in each batch (each once)."""
        return tuple(
            dict.fromkeys(
                r for _, _, mod in self.attention_modules() for r in mod.variant.requests()
            )
        )

    def ablate_fixed_heads(self, heads: Sequence[int]) -> int:
        """Test-time ablation of fixed-pattern heads (Raganato et al. 2020, docs/papers/
        fixed-patterns.md, "Test-time ablation"), in eval mode only; returns
        how many modules it applies to.

        Raises:
            ValueError: the model has no fixed-pattern heads, or a head is out of range.
        """
        from synattn_trainer.variants.fixed import Fixed

        fixed = [v for _, _, m in self.attention_modules() for v in m.variant.members()
                 if isinstance(v, Fixed)]  # fmt: skip
        if heads and not fixed:
            raise ValueError("--ablate: this model has no fixed-pattern heads")
        for v in fixed:
            bad = [h for h in heads if not 0 <= h < v.heads]
            if bad:
                raise ValueError(f"--ablate: heads {bad} out of range 0..{v.heads - 1}")
            v.test_ablate = tuple(heads)
        return len(fixed)

    def set_head_gates(self, gates: Tensor | None) -> None:
        """Gate every head's output: ``gates`` ``[B|1, G]`` (1 = on, 0 = masked), None = all on."""
        if gates is not None and gates.shape[-1] != self.num_heads:
            raise ValueError(f"{gates.shape[-1]} gates for {self.num_heads} heads")
        for _, _, m in self.attention_modules():
            m.head_gates.gates = gates

    def heads_per_module(self) -> list[int]:
        """Each attention module's head count, in global head order (the order of the gates)."""
        mods = sorted(self.attention_modules(), key=lambda x: x[2].gate_offset)
        return [m.h for _, _, m in mods]

    def head_name(self, g: int) -> str:
        """``type.layer.head`` of global head index ``g``."""
        for kind, layer, m in self.attention_modules():
            if m.gate_offset <= g < m.gate_offset + m.h:
                return f"{kind}.{layer}.{g - m.gate_offset}"
        raise IndexError(g)

    def variant_stats(self) -> dict[str, float]:
        """Every variant's numbers to log, prefixed by type and layer."""
        out: dict[str, float] = {}
        for kind, layer, mod in self.attention_modules():
            for key, value in mod.variant.stats().items():
                out[f"{kind}.{layer}.{key}"] = value
        return out

    def _embed(self, emb: nn.Embedding, ids: Tensor) -> Tensor:
        x = emb(ids) * math.sqrt(self.d) + self.pe[: ids.shape[1]]
        out: Tensor = self.drop(x)
        return out

    def encode(self, src: Tensor, syntax: Features | None = None) -> Encoded:
        src_pad, src_eos, syn = src.eq(PAD_ID), src.eq(EOS_ID), syntax or {}
        x = self._embed(self.embed, src)
        memo: dict[Hashable, Tensor] = {}
        masks: dict[Hashable, Tensor | None] = {}
        for i, layer in enumerate(self.encoder):
            ctx = AttnContext("enc_self", i, src_pad, src_pad, syn, self.state, src_eos=src_eos,
                              memo=memo, masks=masks)  # fmt: skip
            x = layer(x, ctx)
        return Encoded(self.enc_norm(x), src_pad, src_eos, syn)

    def decode(self, tgt_in: Tensor, enc: Encoded, positions: Tensor | None = None) -> Tensor:
        """Logits ``[B, T, V]`` for every target prefix position; with ``positions`` (``[N]``
        flat row-major indices into ``[B, T]``, training: ``Batch.scored``, the non-padding
        targets) only those, ``[N, V]`` in that order. The output layer is the largest matrix
        product of a small model, and its rows at padding are thrown away by the loss anyway."""
        tgt_pad = tgt_in.eq(PAD_ID)
        # per-token aux losses; a tensor, so that the host need not wait for the device
        self.state.target_tokens = (~tgt_pad).sum()
        y = self._embed(self.tgt_embed, tgt_in)
        masks: dict[Hashable, Tensor | None] = {}
        for i, layer in enumerate(self.decoder):
            self_ctx = AttnContext("dec_self", i, tgt_pad, tgt_pad, enc.syntax, self.state,
                                   masks=masks)  # fmt: skip
            cross_ctx = AttnContext("enc_dec", i, enc.src_pad, tgt_pad, enc.syntax, self.state,
                                    src_eos=enc.src_eos, masks=masks)  # fmt: skip
            y = layer(y, enc.memory, self_ctx, cross_ctx)
        if positions is not None:
            y = y.flatten(0, 1).index_select(0, positions)
        y = self.dec_norm(y)
        weight = self.tgt_embed.weight if self.out_weight is None else self.out_weight
        return F.linear(y, weight, self.out_bias)

    def beams_share_source(self) -> bool:
        """Whether beam search may keep one copy of each source for all its hypotheses: every
        decoder attention is plain attention (no variant, no head gates, no analysis), so the
        cross-attention's only per-source input is the encoder output."""
        return all(
            type(m.variant) is AttentionVariant
            and m.out_proj is not None
            and m.head_gates.gates is None
            and not m.keep_probs
            for kind, _, m in self.attention_modules()
            if kind != "enc_self"
        )

    def start_decoding(self) -> None:
        """Forget what one decoding call kept (stacked projection weights); called by every
        decoding function before its first step."""
        for _, _, mod in self.attention_modules():
            mod._stacked.clear()

    def decode_step(
        self,
        prefix: Tensor,
        enc: Encoded,
        cache: list[dict[str, dict[str, Tensor]]],
        beam: int = 1,
    ) -> Tensor:
        """Next-token logits ``[B, V]`` given the whole prefix, computing only its last position.

        Earlier positions never change under causal attention, so their keys and values are kept
        in ``cache`` (one dict per decoder layer; reorder it with ``reorder_cache`` for beams).
        With ``beam > 1`` (only when ``beams_share_source``), ``enc`` holds one row per sentence
        and ``prefix`` ``beam`` consecutive rows per sentence.
        """
        t = prefix.shape[1]
        tgt_pad = prefix.eq(PAD_ID)
        y = self.tgt_embed(prefix[:, -1:]) * math.sqrt(self.d) + self.pe[t - 1 : t]
        y = self.drop(y)
        last_pad = tgt_pad[:, -1:]
        while len(cache) < len(self.decoder):
            cache.append({})
        masks: dict[Hashable, Tensor | None] = {}
        for i, layer in enumerate(self.decoder):
            self_ctx = AttnContext("dec_self", i, tgt_pad, last_pad, enc.syntax, self.state,
                                   masks=masks)  # fmt: skip
            cross_ctx = AttnContext("enc_dec", i, enc.src_pad, last_pad, enc.syntax, self.state,
                                    src_eos=enc.src_eos, masks=masks, beam=beam)  # fmt: skip
            y = layer(y, enc.memory, self_ctx, cross_ctx, cache[i])
        y = self.dec_norm(y)
        weight = self.tgt_embed.weight if self.out_weight is None else self.out_weight
        return F.linear(y[:, -1], weight, self.out_bias)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        syntax: Features | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Logits ``[B, T, V]``, or ``[N, V]`` at ``positions`` only (see ``decode``)."""
        return self.decode(tgt_in, self.encode(src, syntax), positions)

    def aux_loss(self) -> Tensor | None:
        """Sum of the variants' auxiliary losses from the last forward pass."""
        losses = [
            x for _, _, m in self.attention_modules() if (x := m.variant.aux_loss()) is not None
        ]
        return torch.stack(losses).sum() if losses else None


def reorder_cache(
    cache: list[dict[str, dict[str, Tensor]]], index: Tensor, static: Tensor | None = None
) -> None:
    """Select the rows ``index`` of every cached self-attention key/value tensor (beam search).

    Cross-attention keys and values depend only on the sentence (every beam of a sentence holds
    the same rows, or one row per sentence with ``beams_share_source``): they are selected with
    ``static`` (their rows of the sentences that stay) only when sentences leave the batch, and
    otherwise left alone (as fairseq does).
    """
    for layer in cache:
        for name, part in layer.items():
            rows = static if name == "cross" else index
            if rows is None:
                continue
            for key in ("k", "v"):
                if key in part:
                    part[key] = part[key].index_select(0, rows)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters (tied matrices once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
