"""Attention variants I against hand-checked worked examples, plus the properties every
variant must have: gradients reach its parameters, padding is never attended, syntax off is
vanilla."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from synattn_shared.features import to_row
from synattn_shared.records import SentenceRecord
from synattn_shared.requests import (
    DeaBias,
    DeaMask,
    FeatureRequest,
    LisaTarget,
    RpIndex,
    SlrBias,
    build_features,
)
from synattn_shared.syntax.reference import (
    head_confidence,
    localness_bias,
    pascal_density,
    syntactic_attention,
)
from synattn_trainer.config import ModelConfig, VariantSpec
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.model import MultiHeadAttention, Transformer
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.variants import AttnContext, build_variant
from synattn_trainer.variants.rel_pos import shaw_index
from synattn_trainer.variants.rhe import head_measures, rhe_gate
from tests.conftest import RUNNING_HEADS, RUNNING_TREE, RUNNING_UPOS, RUNNING_WORDS
from tests.trainer.conftest import tiny_config

DEA_TABLE = [  # the running example
    [1, 1, 0, 0, 0, 0, 0],
    [1, 1, 0, 1, 1, 0, 1],
    [0, 0, 1, 1, 0, 0, 0],
    [0, 1, 1, 1, 0, 0, 0],
    [0, 1, 0, 0, 1, 1, 0],
    [0, 0, 0, 0, 1, 1, 0],
    [0, 1, 0, 0, 0, 0, 1],
]
LPEA_P = [  # the running example, k = 1, tiny parameters
    [0.0000, 0.0000, -1.5232, -1.5232, -1.5232, -1.5232, -0.7616],
    [0.0000, 0.0000, -1.5232, -1.5232, -1.5232, -1.5232, -0.7616],
    [-0.7616, -0.7616, 0.0000, 0.0000, -1.5232, -1.5232, -0.7616],
    [-0.7616, -0.7616, 0.0000, 0.0000, -1.5232, -1.5232, -0.7616],
    [-0.7616, -0.7616, -1.5232, -1.5232, 0.0000, -1.5232, -0.7616],
    [-0.7616, -0.7616, -1.5232, -1.5232, -0.7616, 0.0000, -0.7616],
    [-1.5232, -1.5232, -1.5232, -1.5232, -1.5232, -1.5232, 0.0000],
]
M4 = ModelConfig(d_model=8, d_ff=16, heads=4, dropout=0.0, attn_dropout=0.0)


def running_row(tree: bool = True) -> dict:
    rec = SentenceRecord(
        sent_id="run", words=RUNNING_WORDS, dep_head=RUNNING_HEADS, upos=RUNNING_UPOS,
        tree=RUNNING_TREE if tree else None,
    )  # fmt: skip
    return to_row(rec)


def feats(*requests: FeatureRequest) -> dict[FeatureRequest, torch.Tensor]:
    """The running example's features at word level (one subword per word, no ``</s>``)."""
    row = running_row()
    arrays = build_features([row], [np.arange(len(row["words"]))], requests)
    return {r: torch.from_numpy(a) for r, a in arrays.items()}


def variant(name: str, model: ModelConfig = M4, **options: object):  # type: ignore[no-untyped-def]
    return build_variant(VariantSpec(name=name, options=options), model, "enc_self", 0)


def ctx(syntax: dict[FeatureRequest, torch.Tensor], t: int = 7) -> AttnContext:
    pad = torch.zeros(1, t, dtype=torch.bool)
    eos = torch.zeros(1, t, dtype=torch.bool)
    return AttnContext("enc_self", 0, pad, pad, syntax, src_eos=eos)


def test_dea_bias_is_the_worked_example_on_the_chosen_heads() -> None:
    q = torch.zeros(1, 4, 7, 2)
    bias = variant("dea").logit_bias(q, q, ctx(feats(DeaBias())))
    assert bias.shape == (1, 1, 7, 7)
    assert (bias[0, 0] == 0).int().tolist() == DEA_TABLE
    assert torch.isinf(bias).sum() == 49 - sum(map(sum, DEA_TABLE))
    two = variant("dea", heads=[1, 3]).logit_bias(q, q, ctx(feats(DeaBias())))
    assert (
        two.shape == (1, 4, 7, 7)
        and torch.all(two[0, 0] == 0)
        and torch.equal(two[0, 1], bias[0, 0])
    )
    with pytest.raises(ValueError, match="encoder self-attention only"):
        build_variant(VariantSpec(name="dea"), M4, "enc_dec", 0)


def test_lpea_bias_is_the_worked_example_with_tiny_parameters() -> None:
    v = variant("lpea", k=1)
    with torch.no_grad():
        v.phrasal.table.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))
        v.phrasal.proj.weight.copy_(torch.eye(2))
        v.phrasal.proj.bias.zero_()
        v.phrasal.u.copy_(torch.tensor([1.0, -2.0]))
    q = torch.zeros(1, 4, 7, 2)
    assert v.requests() == (RpIndex(k=1),)
    p = v.logit_bias(q, q, ctx(feats(RpIndex(k=1))))
    np.testing.assert_allclose(p[0, 0].detach().numpy(), LPEA_P, atol=1e-4)
    masking = variant("lpea", k=1, lp_outside="mask")
    masking.phrasal.load_state_dict(v.phrasal.state_dict())
    masked = masking.logit_bias(q, q, ctx(feats(RpIndex(k=1, outside="mask"))))
    assert torch.isinf(masked).sum() == 8  # the eight OUT cells
    extra = variant("lpea", k=1, lp_outside="extra_index")
    assert extra.phrasal.table.shape[0] == 4


def test_lpea_with_k_zero_is_vanilla() -> None:
    """k = 0: one embedding, a constant bias per row, which softmax ignores."""
    torch.manual_seed(0)
    x = torch.randn(1, 7, 8)
    c = ctx(feats(RpIndex(k=0)))
    vanilla = MultiHeadAttention(M4, variant("vanilla")).eval()
    lpea = MultiHeadAttention(M4, variant("lpea", k=0)).eval()
    lpea.load_state_dict(vanilla.state_dict(), strict=False)
    torch.testing.assert_close(lpea(x, x, c), vanilla(x, x, c), rtol=1e-5, atol=1e-6)


def test_rhe_measures_match_the_worked_example_and_the_reference() -> None:
    keep = torch.tensor(DEA_TABLE, dtype=torch.bool)[None]
    uniform = torch.full((1, 1, 7, 7), 1 / 7)
    allowed = keep.float() / keep.float().sum(-1, keepdim=True)
    probs = torch.cat([uniform, allowed[:, None]], 1)
    real = torch.ones(1, 7, dtype=torch.bool)
    h_conf, syn = head_measures(probs, keep, real, real)
    np.testing.assert_allclose(h_conf[0].numpy(), [0.142857, 0.409524], atol=1e-6)
    np.testing.assert_allclose(syn[0].numpy(), [19 / 49, 1.0], atol=1e-6)
    labels = (syn > torch.sigmoid(h_conf))[0].tolist()
    assert labels == [False, True]  # uniform: redundant; DEA-shaped: important
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(7), size=7)
    qm = np.array([1, 1, 1, 1, 1, 1, 0], bool)
    hc, sa = head_measures(torch.tensor(a)[None, None], keep, torch.tensor(qm)[None], real)
    assert hc.item() == pytest.approx(head_confidence(a, qm, np.ones(7, bool)))
    assert sa.item() == pytest.approx(
        syntactic_attention(a, np.array(DEA_TABLE, bool), qm, np.ones(7, bool))
    )


def test_rhe_readings_of_its_criterion_on_the_worked_example() -> None:
    """Eq. 10 compares Syn_attn with sigmoid(h_conf) >= 0.5; the paper's prose with h_conf
    itself. On the worked example a uniform head (Syn_attn 19/49, h_conf 1/7) is redundant by
    Eq. 10 and important by the prose; a fixed gate compares with its constant."""
    h_conf = torch.tensor([[1 / 7, 0.409524]])
    syn = torch.tensor([[19 / 49, 1.0]])
    assert (syn > rhe_gate(h_conf, "dynamic"))[0].tolist() == [False, True]
    assert (syn > rhe_gate(h_conf, "confidence"))[0].tolist() == [True, True]
    assert (syn > rhe_gate(h_conf, "fixed", 0.5))[0].tolist() == [False, True]


@pytest.mark.parametrize("gate", ["dynamic", "confidence"])
def test_rhe_labels_follow_the_configured_reading(gate: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 7, 8)
    c = ctx(feats(DeaBias(), DeaMask()))
    rhe = MultiHeadAttention(M4, variant("rhe", gate=gate)).eval()
    rhe(x, x, c)
    h_conf, syn = rhe.variant.last_measures
    assert h_conf.shape == syn.shape == (1, 4)
    expected = syn > (torch.sigmoid(h_conf) if gate == "dynamic" else h_conf)
    assert torch.equal(rhe.variant.last_labels, expected)


def test_rhe_uses_plain_heads_when_important_and_dea_heads_when_redundant() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 7, 8)
    c = ctx(feats(DeaBias(), DeaMask()))
    base = MultiHeadAttention(M4, variant("vanilla")).eval()
    state = base.state_dict()
    dea = MultiHeadAttention(M4, variant("dea")).eval()
    dea.load_state_dict(state)
    every_redundant = MultiHeadAttention(M4, variant("rhe", gate="fixed", f_gate=1.0)).eval()
    every_redundant.load_state_dict(state)
    torch.testing.assert_close(every_redundant(x, x, c), dea(x, x, c), rtol=1e-5, atol=1e-6)
    every_important = MultiHeadAttention(M4, variant("rhe", gate="fixed", f_gate=1e-9)).eval()
    every_important.load_state_dict(state)
    torch.testing.assert_close(every_important(x, x, c), base(x, x, c), rtol=1e-5, atol=1e-6)
    pruned = MultiHeadAttention(M4, variant("rhe", gate="fixed", f_gate=1.0, mode="prune")).eval()
    pruned.load_state_dict(state)
    torch.testing.assert_close(pruned(x, x, c), base.out_proj.bias.expand(1, 7, 8))
    assert set(every_redundant.variant.stats()) == {f"important.h{h}" for h in range(4)}


def test_shaw_index_and_value_term() -> None:
    idx = shaw_index(5, 5, 2, torch.device("cpu"))
    assert idx[0].tolist() == [2, 3, 4, 4, 4] and idx[4].tolist() == [0, 0, 0, 1, 2]
    v = variant("rel_pos", k=2)
    probs = torch.softmax(torch.randn(1, 4, 5, 5), -1)
    term = v.rel.value_term(probs)
    brute = torch.einsum("bhij,ijd->bhid", probs, v.rel.value[idx])
    torch.testing.assert_close(term, brute)


def test_localness_bias_matches_the_reference_formula() -> None:
    assert localness_bias(3.5, 2.0, 7).tolist() == [
        -6.125,
        -3.125,
        -1.125,
        -0.125,
        -0.125,
        -1.125,
        -3.125,
    ]
    torch.manual_seed(0)
    v = variant("localness")
    q = torch.randn(1, 4, 7, 2)
    with torch.no_grad():
        g = v.logit_bias(q, q, ctx({}))
    with torch.no_grad():
        hidden = torch.tanh(v.w_p(q))
    centre = 7 * torch.sigmoid(hidden @ v.u_p)
    window = 7 * torch.sigmoid(hidden @ v.u_d)
    ref = localness_bias(centre[0, 2, 3].item(), window[0, 2, 3].item(), 7)
    np.testing.assert_allclose(g[0, 2, 3].detach().numpy(), ref, rtol=1e-5)


def test_slr_pure_bias_and_gated_mixing() -> None:
    f = feats(SlrBias(tau=10.0))
    q = torch.zeros(1, 4, 7, 2)
    pure = variant("slr", mode="pure")
    assert torch.equal(pure.logit_bias(q, q, ctx(f))[0, 0], f[SlrBias()][0])
    assert pure.requests() == (SlrBias(tau=10.0),)
    assert variant("slr", tau=2.0).requests() == (SlrBias(tau=2.0),)
    torch.manual_seed(0)
    x = torch.randn(2, 7, 8)
    off = {SlrBias(): torch.zeros(2, 7, 7)}
    pad = torch.zeros(2, 7, dtype=torch.bool)
    c = AttnContext("enc_self", 0, pad, pad, off)
    gated = MultiHeadAttention(M4, variant("slr", mode="gated")).train()
    plain = MultiHeadAttention(M4, variant("vanilla"))
    plain.load_state_dict(gated.state_dict(), strict=False)
    # syntax off (a zero bias): A_syn == A_raw, so the mix is A_raw bit for bit
    out = gated(x, x, c)
    q_ = gated._split(gated.q_proj(x))
    k_ = gated._split(gated.k_proj(x))
    v_ = gated._split(gated.v_proj(x))
    raw = torch.softmax((q_ @ k_.transpose(-1, -2)) / math.sqrt(2), -1) @ v_
    expected = gated.out_proj(raw.transpose(1, 2).reshape(2, 7, 8))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    g = gated.variant.stats()
    assert len(g) == 4 and all(0 < v < 1 for v in g.values())


def test_pascal_density_matches_the_reference() -> None:
    v = variant("pascal")
    n = v.density(torch.tensor([[1.0, 3.5]]), 7)[0].numpy()
    np.testing.assert_allclose(n, pascal_density([1.0, 3.5], 7), rtol=1e-6)
    np.testing.assert_allclose(
        n[0], [0.2420, 0.3989, 0.2420, 0.0540, 0.0044, 0.0001, 0.0000], atol=1e-4
    )


def test_lisa_l2_loss_on_a_tiny_input() -> None:
    v = variant("lisa", head=0).train()
    probs = torch.full((1, 4, 3, 3), 1 / 3)
    c = AttnContext("enc_self", 0, None, None, {LisaTarget(): torch.tensor([[1, 1, 2]])})
    v.observe(probs, c)
    # each row: (1/3)^2 * 2 + (2/3)^2 = 2/3; three rows
    assert v.aux_loss().item() == pytest.approx(2.0)
    assert v.aux_loss() is None  # consumed once per forward


VARIANTS = [
    ("dea", {}), ("lpea", {"k": 3}), ("rhe", {}), ("rhe", {"sea": "lpea"}),
    ("rhe", {"mode": "prune"}), ("slr", {"mode": "pure", "heads": [0, 1]}),
    ("slr", {"mode": "avg", "ignore_p": 0.2}), ("slr", {"mode": "gated"}), ("rel_pos", {"k": 4}),
    ("localness", {}), ("lisa", {}), ("pascal", {}), ("sla", {"m": 1}),
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus_and_tok(m30k: dict[str, Path]):  # type: ignore[no-untyped-def]
    tok = load_tokenizer(m30k["tokenizer"])
    # in memory: some tests switch a row's syntax off by editing its dict
    return load_corpus(m30k["valid"], tok, mapped=False), tok


def _every_registered_with_defaults() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    from synattn_trainer.variants import REGISTRY

    return [(n, {}) for n in sorted(REGISTRY) if not n.startswith("test-")]


CONTRACT = [*_every_registered_with_defaults(), *VARIANTS]  # a new variant is in it by registering


@pytest.mark.parametrize(
    ("name", "options"), CONTRACT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONTRACT)]
)
def test_every_variant_trains_and_ignores_padding(name, options, m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    corpus, tok = corpus_and_tok
    cfg = tiny_config(
        m30k,
        model={"dropout": 0.0, "attn_dropout": 0.0, "heads": 8},
        attention={"enc_self": [{"name": name, "layers": [0], "options": options}]},
    )
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    batch = make_batch(corpus, [0, 1, 2, 3], model.feature_requests())
    logits = model(batch.src, batch.tgt_in, batch.syntax)
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0
    )
    aux = model.aux_loss()
    (loss + (aux if aux is not None else 0)).backward()
    variant_params = dict(model.encoder[0].self_attn.variant.named_parameters())
    for pname, p in variant_params.items():
        if pname.startswith("gate.bn"):
            continue  # BatchNorm's affine parameters get gradients too, but may be tiny
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: no gradient for {pname}"
    # padding: each sentence encoded inside the padded batch equals it encoded alone
    model.eval()
    enc = model.encode(batch.src, batch.syntax)
    for row, i in enumerate(batch.index):
        alone = make_batch(corpus, [i], model.feature_requests())
        single = model.encode(alone.src, alone.syntax).memory[0]
        n = alone.src.shape[1]
        torch.testing.assert_close(enc.memory[row, :n], single, rtol=1e-4, atol=1e-5)
    assert torch.isfinite(enc.memory).all()


@pytest.mark.parametrize("name", ["dea", "slr", "sla", "rhe"])
def test_syntax_switched_off_is_vanilla(name, m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    """Rows without syntax (has_syntax False) give zero biases / all-keep masks: vanilla output."""
    corpus, tok = corpus_and_tok
    options = {"mode": "gated"} if name == "slr" else {}
    cfg = tiny_config(
        m30k,
        model={"dropout": 0.0, "attn_dropout": 0.0},
        attention={"enc_self": [{"name": name, "layers": "all", "options": options}]},
    )
    vanilla_cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0})
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).eval()
    plain = Transformer(vanilla_cfg, tok.get_vocab_size()).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    for row in corpus.rows[:3]:
        row["has_syntax"] = False
    try:
        batch = make_batch(corpus, [0, 1, 2], model.feature_requests())
    finally:
        for row in corpus.rows[:3]:
            row["has_syntax"] = True
    # rhe: with syntax off DEA keeps every key, so enlivened heads equal plain heads
    out = model(batch.src, batch.tgt_in, batch.syntax)
    ref = plain(batch.src, batch.tgt_in)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def _registered() -> list[str]:
    from synattn_trainer.variants import REGISTRY

    return sorted(n for n in REGISTRY if not n.startswith("test-"))


@pytest.mark.parametrize("name", _registered())
def test_analysis_reads_what_the_model_applied(name, m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    """The probabilities contract, over the registry itself: switching analysis on never
    changes the output, and every attention module exports probabilities of the right shape
    that are distributions over the real keys (pruned heads: all zero)."""
    corpus, tok = corpus_and_tok
    cfg = tiny_config(
        m30k,
        model={"dropout": 0.0, "attn_dropout": 0.0, "heads": 8},
        attention={"enc_self": [{"name": name, "layers": [0]}]},
    )
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).eval()
    batch = make_batch(corpus, [0, 1, 2], model.feature_requests())
    with torch.no_grad():
        plain = model(batch.src, batch.tgt_in, batch.syntax)
        modules = model.attention_modules()
        for _, _, m in modules:
            m.keep_probs = True
        analysed = model(batch.src, batch.tgt_in, batch.syntax)
    assert torch.equal(plain, analysed), f"{name}: analysis changed the output"
    src_real = batch.src.ne(0)
    for kind, layer, m in modules:
        p = m.last_probs
        assert p is not None, (kind, layer)
        keys = batch.src.shape[1] if kind != "dec_self" else batch.tgt_in.shape[1]
        queries = batch.src.shape[1] if kind == "enc_self" else batch.tgt_in.shape[1]
        assert p.shape == (3, m.h, queries, keys), (kind, layer, p.shape)
        if kind == "enc_self":
            rows = p.float().sum(-1)[src_real[:, None, :].expand(-1, m.h, -1)]
            assert torch.all((rows - 1).abs() < 1e-4), (name, kind, layer)
            pad_keys = p[~src_real[:, None, None, :].expand_as(p)]
            assert torch.all(pad_keys == 0), (name, "attends padding")


@pytest.mark.parametrize("word_based", [False, True])
def test_exported_fixed_heads_are_their_patterns(word_based, m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    """Rows of a fixed head are its pattern, whatever the sentence's words (Raganato et al.)."""
    from synattn_trainer.patterns import token_patterns

    corpus, tok = corpus_and_tok
    cfg = tiny_config(
        m30k,
        model={"dropout": 0.0, "attn_dropout": 0.0, "heads": 8},
        attention={"enc_self": [{"name": "fixed", "options": {"word_based": word_based}}]},
    )
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).eval()
    batch = make_batch(corpus, [5], model.feature_requests())
    module = model.encoder[0].self_attn
    module.keep_probs = True
    with torch.no_grad():
        model.encode(batch.src, batch.syntax)
        first = module.last_probs[0, :7].clone()
        other = batch.src.clone()
        other[0, :-1] = torch.randint(5, tok.get_vocab_size(), (other.shape[1] - 1,))
        model.encode(other, batch.syntax)
        second = module.last_probs[0, :7]
    assert torch.equal(first, second)  # the words do not matter, only positions (and words ids)
    if not word_based:
        n = batch.src.shape[1]
        expected = torch.tensor(np.array(token_patterns(n)[:7]), dtype=first.dtype)
        torch.testing.assert_close(first, expected)


def test_lisa_loss_skips_rows_without_syntax(m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    """A row with ``has_syntax`` False adds nothing to LISA's loss (and needs no parse)."""
    corpus, tok = corpus_and_tok
    cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0},
                      attention={"enc_self": [{"name": "lisa", "layers": [0]}]})  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    requests = model.feature_requests()

    def loss_of(index: list[int]) -> float:
        b = make_batch(corpus, index, requests)
        model(b.src, b.tgt_in, b.syntax)
        aux = model.aux_loss()
        return 0.0 if aux is None else float(aux.detach())

    alone = loss_of([0])
    saved = corpus.rows[1]["has_syntax"], corpus.rows[1]["dep_head"]
    corpus.rows[1]["has_syntax"], corpus.rows[1]["dep_head"] = False, None
    try:
        together = loss_of([0, 1])
    finally:
        corpus.rows[1]["has_syntax"], corpus.rows[1]["dep_head"] = saved
    assert alone > 0 and together == pytest.approx(alone, rel=1e-5)
    assert loss_of([0, 1]) > alone  # with its parse back, row 1 counts again


def test_source_without_eos(m30k) -> None:  # type: ignore[no-untyped-def]
    """``data.source_eos: false`` (the fixed-pattern presets): no ``</s>`` on the source, every
    subword belongs to a word, and fixed patterns end on the last real token."""
    from synattn_trainer.patterns import token_patterns

    tok = load_tokenizer(m30k["tokenizer"])
    with_eos = load_corpus(m30k["valid"], tok)
    without = load_corpus(m30k["valid"], tok, source_eos=False)
    assert [len(s) for s in without.src] == [len(s) - 1 for s in with_eos.src]
    assert all((s2w >= 0).all() for s2w in without.s2w)
    assert not any((s == 2).any() for s in without.src)
    cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0, "heads": 8},
                      attention={"enc_self": [{"name": "fixed", "layers": [0]}]})  # fmt: skip
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"source_eos": False})})
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).eval()
    b = make_batch(without, [4], model.feature_requests())
    module = model.encoder[0].self_attn
    module.keep_probs = True
    with torch.no_grad():
        model.encode(b.src, b.syntax)
    n = b.src.shape[1]
    expected = torch.tensor(np.array(token_patterns(n)[:7]), dtype=module.last_probs.dtype)
    torch.testing.assert_close(module.last_probs[0, :7], expected)


def test_test_time_ablation_acts_only_in_eval_and_only_when_asked(m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    """The fixed-pattern paper's ablation of single patterns is a test-time switch: it changes
    the eval output, never the training forward, and never the config."""
    corpus, tok = corpus_and_tok
    cfg = tiny_config(m30k, model={"dropout": 0.0, "attn_dropout": 0.0, "heads": 8},
                      attention={"enc_self": [{"name": "fixed"}]})  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size())
    b = make_batch(corpus, [0, 1], model.feature_requests())
    with torch.no_grad():
        model.eval()
        base = model.encode(b.src, b.syntax).memory
        train_base = model.train().encode(b.src, b.syntax).memory
        assert model.ablate_fixed_heads([2]) == 2  # both encoder layers
        assert not torch.equal(model.eval().encode(b.src, b.syntax).memory, base)
        assert torch.equal(model.train().encode(b.src, b.syntax).memory, train_base)
        model.ablate_fixed_heads([])
        assert torch.equal(model.eval().encode(b.src, b.syntax).memory, base)
    assert cfg.attention["enc_self"][0].options == {}
    with pytest.raises(ValueError, match="out of range"):
        model.ablate_fixed_heads([8])
    plain = Transformer(tiny_config(m30k), tok.get_vocab_size())
    with pytest.raises(ValueError, match="no fixed-pattern heads"):
        plain.ablate_fixed_heads([0])
