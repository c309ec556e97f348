"""Head-level variants against hand-checked worked examples: fixed patterns (token and word),
the three disagreement terms, simple and EM routing; and their integration in the model."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.model import Transformer, count_parameters
from synattn_trainer.patterns import token_patterns, word_patterns
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.variants.disagreement import (
    cosine_similarity_term,
    masked_mean,
    position_term,
)
from synattn_trainer.variants.routing import em_routing, simple_routing, squash
from tests.trainer.conftest import tiny_config


def test_token_patterns_worked_example() -> None:
    p = token_patterns(6)
    assert p[3, 5, :4] == pytest.approx([f / 100 for f in (1, 8, 27, 64)])
    assert p[3, 4, :3] == pytest.approx([1 / 36, 8 / 36, 27 / 36])
    assert p[3, 3, :2] == pytest.approx([1 / 9, 8 / 9])
    assert p[3, 2].tolist() == [1, 0, 0, 0, 0, 0] and p[3, 0, 0] == 1 and p[3, 1, 1] == 1
    np.testing.assert_allclose(p[4, 0], [0, 0, 0.64, 0.27, 0.08, 0.01])
    np.testing.assert_allclose(p[4, 1], [0, 0, 0, 0.75, 0.2222, 0.0278], atol=1e-4)
    assert p[4, 3].tolist() == [0, 0, 0, 0, 0, 1] and p[4, 4, 4] == 1 and p[4, 5, 5] == 1
    six = [Fraction(c, 441) for c in (1, 8, 27, 64, 125, 216)]
    np.testing.assert_allclose(p[5, 2], [float(x) for x in six])
    np.testing.assert_allclose(p[6, 0], [float(x) for x in reversed(six)])
    assert p[7, :, 5].tolist() == [1] * 6
    assert p[1, 0].tolist() == [1, 0, 0, 0, 0, 0] and p[2, 5].tolist() == [0, 0, 0, 0, 0, 1]


@pytest.mark.parametrize("n", range(1, 12))
def test_pattern_rows_sum_to_one_and_mirror(n: int) -> None:
    p = token_patterns(n)
    np.testing.assert_allclose(p.sum(-1), 1.0)
    flip = p[:, ::-1, ::-1]
    np.testing.assert_allclose(p[2], flip[1])
    np.testing.assert_allclose(p[4], flip[3])
    np.testing.assert_allclose(p[6], flip[5])


def test_short_sentences() -> None:
    assert token_patterns(1).tolist() == [[[1.0]]] * 8
    p = token_patterns(2)
    assert p[1].tolist() == [[1, 0], [1, 0]] and p[2].tolist() == [[0, 1], [0, 1]]
    np.testing.assert_allclose(p[5], [[1 / 9, 8 / 9]] * 2)
    # the seed's figure sentence, n = 7: P4 row 6 and P6
    p7 = token_patterns(7)
    np.testing.assert_allclose(p7[3, 6], np.array([1, 8, 27, 64, 125, 0, 0]) / 225)
    np.testing.assert_allclose(p7[5, 0], np.array([1, 8, 27, 64, 125, 216, 343]) / 784)


def test_word_patterns_worked_example() -> None:
    p = word_patterns([0, 1, 2, 3, 3, 4])
    assert p[0, 3].tolist() == [0, 0, 0, 0.5, 0.5, 0]
    assert p[1, 5].tolist() == [0, 0, 0, 0.5, 0.5, 0]
    assert p[2, 2].tolist() == [0, 0, 0, 0.5, 0.5, 0]
    np.testing.assert_allclose(p[3, 4], [1 / 9, 8 / 9, 0, 0, 0, 0])
    np.testing.assert_allclose(p[4, 0], [0, 0, 0.75, 0.1111, 0.1111, 0.0278], atol=1e-4)
    np.testing.assert_allclose(p[5, 0], np.array([1, 8, 27, 32, 32, 125]) / 225)
    np.testing.assert_allclose(p[6, 0], np.array([125, 64, 27, 4, 4, 1]) / 225)
    np.testing.assert_allclose(p.sum(-1), 1.0)


def test_a_batch_carries_each_fixed_pattern_built_on_the_host() -> None:
    """``FixedPattern`` is one pattern of ``token_patterns`` or ``word_patterns`` as float32,
    the numbers the fixed heads read: ``</s>`` is a word of its own, padding is zero."""
    from synattn_shared.requests import build_features
    from synattn_trainer.patterns import FixedPattern

    rows = [{"words": ["a", "bc", "d"]}, {"words": ["e"]}]
    s2ws = [np.array([0, 1, 1, 2, -1]), np.array([0, -1])]
    requests = [FixedPattern(i, word_based) for i in range(8) for word_based in (False, True)]
    feats = build_features(rows, s2ws, requests)
    for i in range(8):
        token, word = feats[FixedPattern(i)], feats[FixedPattern(i, True)]
        assert token.dtype == word.dtype == np.float32 and token.shape == (2, 5, 5)
        assert (token[0] == token_patterns(5)[i].astype(np.float32)).all()
        assert (word[0] == word_patterns([0, 1, 1, 2, 3])[i].astype(np.float32)).all()
        assert (token[1, :2, :2] == token_patterns(2)[i].astype(np.float32)).all()
        assert not token[1, 2:].any() and not token[1, :, 2:].any()
        assert not word[1, 2:].any() and not word[1, :, 2:].any()


def test_disagreement_terms_worked_example() -> None:
    mask = torch.tensor([[True, True, False]])
    v = torch.tensor([[[[1, 0], [1, 1], [9, 9]], [[1, 1], [2, 0.5], [9, 9]]]])
    sub = cosine_similarity_term(v)
    np.testing.assert_allclose(sub[0, :2], [0.853553, 0.928746], atol=1e-6)
    assert masked_mean(sub, mask).item() == pytest.approx(0.891150, abs=1e-6)
    a1 = [[0.8, 0.2, 0], [0.5, 0.5, 0], [0.3, 0.7, 0]]
    a2 = [[0.1, 0.9, 0], [0.5, 0.5, 0], [0.6, 0.4, 0]]
    a = torch.tensor([[a1, a2]])
    assert masked_mean(position_term(a), mask).item() == pytest.approx(0.5025)
    assert masked_mean(position_term(a, False), mask).item() == pytest.approx(0.38)
    o = torch.tensor([[[[0.5, -0.5], [2, 1], [0, 0]], [[-0.5, 0.5], [1, 2], [0, 0]]]])
    out = cosine_similarity_term(o)
    np.testing.assert_allclose(out[0].tolist(), [0.0, 0.9, 0.0], atol=1e-6)
    assert masked_mean(out, mask).item() == pytest.approx(0.45)
    s = torch.tensor([[1.0, 0.5, 0.7], [0.2, 9.0, 9.0]])
    assert masked_mean(s, torch.tensor([[1, 1, 1], [1, 0, 0]]).bool()).item() == pytest.approx(0.6)


def test_double_sums_equal_the_fast_forms() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 4, 5, 3)
    u = x / x.norm(dim=-1, keepdim=True)
    brute = sum((u[0, i] * u[0, j]).sum(-1) for i in range(4) for j in range(4)) / 16
    torch.testing.assert_close(cosine_similarity_term(x)[0], brute)
    a = torch.softmax(torch.randn(1, 4, 5, 6), -1)
    brute_p = sum((a[0, i] * a[0, j]).sum(-1) for i in range(4) for j in range(4)) / 16
    torch.testing.assert_close(position_term(a)[0], brute_p)


VOTES = torch.tensor(
    [[[1.0, 0.0], [0.0, 1.0]], [[0.8, 0.2], [0.5, 0.5]], [[0.9, -0.1], [-1.0, 0.0]]]
)  # [H=3, N=2, Dc=2]


def test_simple_routing_worked_example() -> None:
    assert squash(torch.tensor([2.0])).item() == pytest.approx(0.8)
    one = simple_routing(VOTES, iterations=1)
    np.testing.assert_allclose(one.flatten(), [0.447546, 0.016576, -0.068745, 0.206235], atol=1e-6)
    three = simple_routing(VOTES, iterations=3)
    np.testing.assert_allclose(
        three.flatten(), [0.446852, 0.016105, -0.061854, 0.217699], atol=1e-6
    )


def test_em_routing_worked_example() -> None:
    zero = torch.zeros(2)
    out = em_routing(VOTES, zero, zero, iterations=3)
    np.testing.assert_allclose(out.flatten(), [0.904759, 0.024333, 0.260230, 0.335967], atol=1e-5)
    out_b = em_routing(VOTES, torch.full((2,), 0.5), torch.full((2,), 0.1), iterations=3)
    np.testing.assert_allclose(
        out_b.flatten(), [0.906598, 0.020748, 0.377926, 0.494629], atol=1e-5
    )


@pytest.fixture(scope="module")
def data(m30k: dict[str, Path]):  # type: ignore[no-untyped-def]
    tok = load_tokenizer(m30k["tokenizer"])
    return load_corpus(m30k["valid"], tok), tok


@pytest.mark.parametrize(
    ("attention", "extra"),
    [
        ({"enc_self": [{"name": "fixed", "options": {"fixed": 3}}]}, {}),
        ({"enc_self": [{"name": "fixed", "options": {"fixed": 4, "word_based": True}}]}, {}),
        ({"enc_self": [{"name": "routing", "layers": [0, 1], "options": {"method": "em"}}]}, {}),
        ({"enc_self": [{"name": "routing", "layers": [0], "options": {"method": "simple"}}]}, {}),
        (
            {
                t: [{"name": "disagreement", "options": {"term": "output"}}]
                for t in ("enc_self", "dec_self", "enc_dec")
            },
            {"aux": True},
        ),
        ({"enc_self": [{"name": "disagreement", "options": {"term": "subspace"}}]}, {"aux": True}),
        ({"dec_self": [{"name": "disagreement", "options": {"term": "position"}}]}, {"aux": True}),
    ],
)
def test_head_variants_train_and_keep_padding_out(attention, extra, m30k, data) -> None:  # type: ignore[no-untyped-def]
    corpus, tok = data
    cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0}, attention=attention)
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    batch = make_batch(corpus, [0, 1, 2, 3], model.feature_requests())
    logits = model(batch.src, batch.tgt_in, batch.syntax)
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0
    )
    aux = model.aux_loss()
    assert (aux is not None) == bool(extra.get("aux"))
    (loss + (aux if aux is not None else 0)).backward()
    for kind, layer, mod in model.attention_modules():
        for name, p in mod.variant.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, (kind, layer, name)
    model.eval()
    enc = model.encode(batch.src, batch.syntax)
    for row, i in enumerate(batch.index):
        alone = make_batch(corpus, [i], model.feature_requests())
        n = alone.src.shape[1]
        single = model.encode(alone.src, alone.syntax).memory[0]
        torch.testing.assert_close(enc.memory[row, :n], single, rtol=1e-4, atol=1e-5)


def test_disagreement_loss_is_lambda_times_the_mean_similarity_per_token(m30k, data) -> None:  # type: ignore[no-untyped-def]
    corpus, tok = data
    att = {"enc_self": [{"name": "disagreement", "options": {"term": "output", "weight": 2.0}}]}
    cfg = tiny_config(m30k, attention=att)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    batch = make_batch(corpus, [0, 1])
    model(batch.src, batch.tgt_in)
    variants = [m.variant for k, _, m in model.attention_modules() if k == "enc_self"]
    sims = [v.similarity.item() for v in variants]
    aux = model.aux_loss()
    expected = 2.0 * sum(sims) / len(sims) * batch.ntokens
    assert aux.item() == pytest.approx(expected, rel=1e-5)


def test_routing_replaces_the_output_projection_parameters(m30k, data) -> None:  # type: ignore[no-untyped-def]
    _, tok = data
    d, h = 32, 4
    plain = Transformer(tiny_config(m30k), tok.get_vocab_size())
    routed = Transformer(
        tiny_config(m30k, attention={"enc_self": [{"name": "routing", "layers": [0, 1]}]}),
        tok.get_vocab_size(),
    )
    per_layer = h * d * d + h * d + 2 * d + 2 * d  # H d^2 + H d, + LayerNorm, + beta (N = d)
    assert count_parameters(routed) - count_parameters(plain) == 2 * per_layer


def _routed_to_wo_rms(m30k, data, **options) -> float:  # type: ignore[no-untyped-def]
    """RMS of the routed branch over that of the W^O output of the same heads, at
    initialisation, in the m30k-tiny8 shape (d = 128, 8 heads), on real sentences."""
    corpus, tok = data
    shape = {"d_model": 128, "d_ff": 512, "heads": 8}
    spec = {"name": "routing", "layers": [0, 1], "options": options}
    torch.manual_seed(0)
    routed = Transformer(
        tiny_config(m30k, model=shape, attention={"enc_self": [spec]}), tok.get_vocab_size()
    ).eval()
    wo = torch.nn.Linear(128, 128)  # an ordinary attention module's W^O, default init
    ratios: list[float] = []
    for _, _layer, module in routed.attention_modules():
        variant = module.variant
        if type(variant).__name__ != "Routing":
            continue
        original = variant.aggregate

        def spy(heads, out_proj, ctx, original=original):  # type: ignore[no-untyped-def]
            out = original(heads, out_proj, ctx)
            concat = heads.transpose(1, 2).reshape(out.shape)
            ratios.append(float(out.pow(2).mean().sqrt() / wo(concat).pow(2).mean().sqrt()))
            return out

        variant.aggregate = spy
    batch = make_batch(corpus, list(range(8)))
    with torch.no_grad():
        routed(batch.src, batch.tgt_in)
    assert len(ratios) == 2
    return max(ratios)


def test_the_routed_branch_starts_at_the_scale_of_a_wo_output(m30k, data) -> None:  # type: ignore[no-untyped-def]
    """Routing's decision (docs/papers/diversity.md): LayerNorm on the vote network's input and
    none on the output keeps the routed branch of the order of W^O's output at initialisation; the
    old placement (output LayerNorm) starts it at unit RMS, several times larger."""
    new = _routed_to_wo_rms(m30k, data)
    old = _routed_to_wo_rms(m30k, data, output_layernorm=True)
    assert 0.2 < new < 2.0
    assert old > 4.0 and old > 5 * new


def test_routing_has_no_vote_dropout_unless_the_old_placement(m30k, data) -> None:  # type: ignore[no-untyped-def]
    _, tok = data
    for old, p in ((False, 0.0), (True, 0.1)):
        spec = {"name": "routing", "layers": [0], "options": {"output_layernorm": old}}
        model = Transformer(
            tiny_config(m30k, attention={"enc_self": [spec]}), tok.get_vocab_size()
        )
        mods = model.attention_modules()
        drops = [m.variant.drop.p for k, i, m in mods if k == "enc_self" and i == 0]
        assert drops == [p]


def test_one_learned_head_baseline(m30k, data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """1L (docs/papers/fixed-patterns.md): one encoder self-attention head of d_h = d per layer."""
    from synattn_trainer import headmask
    from synattn_trainer.config import load_config
    from synattn_trainer.presets import VARIANTS

    corpus, tok = data
    cfg = tiny_config(m30k, model={"enc_heads": 1})
    model = Transformer(cfg, tok.get_vocab_size())
    enc = [m for k, _, m in model.attention_modules() if k == "enc_self"]
    assert [(m.h, m.d_head) for m in enc] == [(1, 32), (1, 32)]
    assert model.num_heads == 2 * 1 + 2 * 2 * 4
    assert model.head_name(1) == "enc_self.1.0" and model.head_name(2) == "dec_self.0.0"
    # the same projections, so the same number of parameters as 8L
    assert count_parameters(model) == count_parameters(Transformer(tiny_config(m30k), 600))
    batch = make_batch(corpus, [0, 1, 2])
    logits = model(batch.src, batch.tgt_in)
    logits.logsumexp(-1).mean().backward()
    assert enc[0].q_proj.weight.grad.abs().sum() > 0
    # head gates and per-module normalisation follow the uneven module sizes
    sizes = [m.h for _, _, m in sorted(model.attention_modules(), key=lambda x: x[2].gate_offset)]
    assert sizes == [1, 1, 4, 4, 4, 4]
    norm = headmask.normalise_by_layer(np.arange(1.0, 19.0), sizes)
    assert norm[:2].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(np.linalg.norm(norm[2:6]), 1.0)
    # the preset merges into a config's model section instead of replacing it
    yaml_cfg = tmp_path / "c.yaml"
    yaml_cfg.write_text(cfg.model_dump_json())
    loaded = load_config(yaml_cfg, VARIANTS["1L"])
    assert loaded.model.enc_heads == 1 and loaded.model.d_model == 32
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(m30k, model={"enc_heads": 3})
