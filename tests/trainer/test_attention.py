"""The attention extension point: zero bias is exactly vanilla, -inf blocks, padding is never
attended, variants register by name with typed options."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from synattn_trainer.config import ModelConfig, TrainConfig, VariantSpec
from synattn_trainer.model import MultiHeadAttention, Transformer, combine_masks
from synattn_trainer.variants import (
    AttentionVariant,
    AttnContext,
    VariantConfig,
    build_variant,
    register,
)
from synattn_trainer.variants.base import REGISTRY, VanillaConfig

CFG = ModelConfig(d_model=16, d_ff=32, heads=4, dropout=0.0, attn_dropout=0.0)


class BiasConfig(VariantConfig):
    value: float = 0.0
    block_key: int | None = None
    keep_probs: bool = False


class ConstantBias(AttentionVariant):
    """A test variant: a constant bias, optionally -inf on one key; records probabilities."""

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        b = torch.full((1, 1, q.shape[2], k.shape[2]), self.config.value)
        if self.config.block_key is not None:
            b[..., self.config.block_key] = -math.inf
        return b

    def needs_probs(self, ctx: AttnContext) -> bool:
        return self.config.keep_probs

    def observe(self, probs: Tensor, ctx: AttnContext) -> None:
        self.seen = probs


if "test-bias" not in REGISTRY:
    register("test-bias", BiasConfig)(ConstantBias)


def attention(
    name: str = "vanilla", causal: bool = False, **options: object
) -> MultiHeadAttention:
    torch.manual_seed(0)
    variant = build_variant(VariantSpec(name=name, options=options), CFG, "enc_self", 0)
    return MultiHeadAttention(CFG, variant, causal=causal).eval()


def ctx(pad: Tensor | None = None) -> AttnContext:
    return AttnContext("enc_self", 0, pad, pad)


def test_zero_bias_through_the_extension_point_is_exactly_vanilla() -> None:
    x = torch.randn(3, 7, 16)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    vanilla = attention()(x, x, ctx(pad))
    biased = attention("test-bias", value=0.0)(x, x, ctx(pad))
    assert torch.equal(vanilla, biased)
    # the explicit-probabilities path (analysis) agrees with the fused kernel numerically
    explicit = attention("test-bias", value=0.0, keep_probs=True)(x, x, ctx(pad))
    torch.testing.assert_close(explicit, vanilla, rtol=1e-5, atol=1e-6)


def test_a_minus_inf_mask_blocks_attention() -> None:
    x = torch.randn(2, 5, 16)
    mha = attention("test-bias", block_key=2, keep_probs=True)
    out = mha(x, x, ctx())
    probs = mha.variant.seen
    assert torch.all(probs[..., 2] == 0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 5))
    # changing the blocked token's value changes nothing
    x2 = x.clone()
    x2[:, 2] += 10.0
    out2 = mha(x2, x, ctx())  # queries may change; keys/values are the blocked ones below
    out3 = mha(x, x2, ctx())
    assert not torch.equal(out, out2)
    torch.testing.assert_close(out, out3)


def test_padding_never_receives_attention() -> None:
    x = torch.randn(2, 6, 16)
    pad = torch.tensor([[False] * 6, [False] * 3 + [True] * 3])
    mha = attention("test-bias", keep_probs=True)
    out = mha(x, x, ctx(pad))
    assert torch.all(mha.variant.seen[1, :, :, 3:] == 0)
    x2 = x.clone()
    x2[1, 3:] = torch.randn(3, 16) * 100  # whatever sits in the padding
    out2 = attention()(x2, x2, ctx(pad))
    torch.testing.assert_close(out[1, :3], out2[1, :3])


def test_causal_mask_hides_the_future() -> None:
    m = combine_masks(None, True, None, 4, 4, torch.device("cpu"))
    assert m is not None and torch.isinf(m).sum() == 6 and m[0, 1] == -math.inf and m[3, 0] == 0


def test_variant_selection_per_type_and_layer_is_configuration() -> None:
    cfg = TrainConfig.model_validate(
        {
            "data": {"train": "t", "valid": "v", "tokenizer": "k"},
            "model": {"enc_layers": 3, "dec_layers": 2, "d_model": 16, "d_ff": 32, "heads": 4},
            "attention": {
                "enc_self": [{"name": "test-bias", "layers": [1], "options": {"value": 0.5}}]
            },
        }
    )
    model = Transformer(cfg, vocab_size=50)
    names = {(k, i): type(m.variant).__name__ for k, i, m in model.attention_modules()}
    assert names[("enc_self", 1)] == "ConstantBias"
    assert names[("enc_self", 0)] == names[("dec_self", 1)] == "AttentionVariant"
    assert len(names) == 3 + 2 * 2


def test_unknown_variant_and_bad_options_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown attention variant 'nope'"):
        build_variant(VariantSpec(name="nope"), CFG, "enc_self", 0)
    with pytest.raises(ValueError, match="variant 'test-bias' on enc_self layer 0"):
        build_variant(VariantSpec(name="test-bias", options={"colour": 1}), CFG, "enc_self", 0)
    assert REGISTRY["vanilla"][1] is VanillaConfig


def test_float64_attention_is_exact_for_long_sentences() -> None:
    """SDPA with float64 queries and a float32 mask is wrong from T = 16 on (torch 2.13, CPU);
    the attention module casts the mask to the query dtype."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(CFG, build_variant(VariantSpec(), CFG, "dec_self", 0), causal=True)
    mha = mha.double().eval()
    x = torch.randn(1, 21, 16, dtype=torch.float64)
    pad = torch.zeros(1, 21, dtype=torch.bool)
    out = mha(x, x, ctx(pad))
    q, k, v = (mha._split(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    future = torch.ones(21, 21, dtype=torch.bool).triu(1)
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(4) + torch.zeros(
        21, 21, dtype=torch.float64
    ).masked_fill(future, -math.inf)
    ref = mha.out_proj((torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(1, 21, 16))
    torch.testing.assert_close(out, ref)
