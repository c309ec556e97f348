"""Presets as the papers set them, and composition: several variants on one layer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from synattn_shared.requests import SlrBias
from synattn_trainer.config import ModelConfig, VariantSpec
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.model import Transformer
from synattn_trainer.presets import VARIANTS
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.variants import AttnContext, Composite, build_layer_variant
from tests.trainer.conftest import preset_config, tiny_config

M8 = ModelConfig(d_model=32, d_ff=64, heads=8, dropout=0.0, attn_dropout=0.0)


@pytest.fixture(scope="module")
def corpus_and_tok(m30k: dict[str, Path]):  # type: ignore[no-untyped-def]
    tok = load_tokenizer(m30k["tokenizer"])
    return load_corpus(m30k["valid"], tok), tok


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_preset_trains_and_is_analysed_as_trained(name, m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    """Each preset builds, every parameter of its variants gets a gradient, padding is never
    attended, and analysis on equals analysis off."""
    _, tok = corpus_and_tok
    cfg = preset_config(m30k, name)
    corpus = load_corpus(m30k["valid"], tok, source_eos=cfg.data.source_eos)
    torch.manual_seed(0)
    model = Transformer(cfg, tok.get_vocab_size()).train()
    model.state.max_updates = model.state.update = 10  # past any pre-warm-up
    batch = make_batch(corpus, [0, 1, 2, 3], model.feature_requests())
    logits = model(batch.src, batch.tgt_in, batch.syntax)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                             ignore_index=0)  # fmt: skip
    aux = model.aux_loss()
    (loss + (aux if aux is not None else 0)).backward()
    for kind, layer, m in model.attention_modules():
        for pname, p in m.variant.named_parameters():
            if ".bn." in f".{pname}" or pname.startswith("gate.bn"):
                continue
            assert p.grad is not None, f"{name}: {kind}.{layer} {pname} has no gradient"
    model.eval()
    with torch.no_grad():
        plain = model(batch.src, batch.tgt_in, batch.syntax)
        for _, _, m in model.attention_modules():
            m.keep_probs = True
        analysed = model(batch.src, batch.tgt_in, batch.syntax)
        enc = model.encode(batch.src, batch.syntax)
        for row, i in enumerate(batch.index[:2]):
            alone = make_batch(corpus, [i], model.feature_requests())
            single = model.encode(alone.src, alone.syntax).memory[0]
            n = alone.src.shape[1]
            torch.testing.assert_close(enc.memory[row, :n], single, rtol=1e-4, atol=1e-5)
    assert torch.equal(plain, analysed)


def enc(model: Transformer) -> list[list[str]]:
    return kinds(model, "enc_self")


def kinds(model: Transformer, kind: str) -> list[list[str]]:
    """Per layer of ``kind``: the class names of its variants."""
    return [
        [type(p).__name__ for p in m.variant.members()]
        for k, _, m in model.attention_modules()
        if k == kind
    ]


def test_placements_follow_the_papers(m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    _, tok = corpus_and_tok

    def built(name: str, **model: object) -> Transformer:
        return Transformer(preset_config(m30k, name, **model), tok.get_vocab_size())

    six = {"enc_layers": 6, "dec_layers": 2}
    van = ["AttentionVariant"]
    # RHE + SEA: SEA/RHE on layer 1 only; Rel_Pos everywhere; Localness on the lower half
    assert enc(built("rhe+lpea", **six)) == [["Rhe"]] + [van] * 5
    assert enc(built("localness", **six)) == [["Localness"]] * 3 + [van] * 3
    assert enc(built("localness")) == [["Localness"], van]
    assert enc(built("rel_pos+rhe")) == [["RelPos", "Rhe"], ["RelPos"]]
    assert enc(built("localness+rhe")) == [["Localness", "Rhe"], van]
    # gated SLR: Pure on the first two heads of the first layer; gated "All" with K and p
    pure = preset_config(m30k, "slr-pure").attention["enc_self"][0]
    assert pure.layers == [0] and pure.options == {"mode": "pure", "heads": [0, 1]}
    gated = preset_config(m30k, "slr-gated").attention["enc_self"][0].options
    assert gated["prewarm_fraction"] > 0 and 0 < gated["ignore_p"] <= 0.4
    bn = preset_config(m30k, "slr-gated-bn").attention["enc_self"][0].options
    assert bn == {"mode": "gated"}
    # diversity: both together
    both = built("disagreement+routing")
    assert enc(both) == [["Disagreement", "Routing"]] * 2
    assert kinds(both, "enc_dec") == [["Disagreement"]] * 2
    # the fixed-pattern paper (OpenNMT-py) trains without source </s>; the RHE paper (its Fig. 5
    # source ends in <EOS>) and the others with it
    for name in ("fixed-word", "fixed-token", "8F", "1L", "8L"):
        assert preset_config(m30k, name).data.source_eos is False, name
    with_eos = ("vanilla", "dea", "lpea", "rhe+dea", "rhe+lpea", "rhe-prune", "rel_pos+rhe",
                "localness+rhe", "slr-gated", "headmask-impt", "disagreement+routing")  # fmt: skip
    for name in with_eos:
        assert preset_config(m30k, name).data.source_eos is True, name
    assert preset_config(m30k, "8F").attention["enc_self"][0].options == {"fixed": 8}


def test_composition_adds_the_biases(m30k) -> None:  # type: ignore[no-untyped-def]
    specs = [VariantSpec(name="localness"), VariantSpec(name="slr", options={"mode": "pure"})]
    layer = build_layer_variant(specs, M8, "enc_self", 0)
    assert isinstance(layer, Composite)
    torch.manual_seed(0)
    q = torch.randn(1, 8, 5, 4)
    slr = torch.log(torch.rand(1, 5, 5))
    ctx = AttnContext("enc_self", 0, torch.zeros(1, 5, dtype=torch.bool), None,
                      {SlrBias(): slr})  # fmt: skip
    local, pure = layer.members()
    both = layer.logit_bias(q, q, ctx)
    torch.testing.assert_close(both, local.logit_bias(q, q, ctx) + pure.logit_bias(q, q, ctx))
    assert layer.requests() == (SlrBias(),)


@pytest.mark.parametrize(
    ("specs", "needle"),
    [
        ([{"name": "fixed"}, {"name": "slr", "options": {"mode": "gated"}}], "'fixed' and 'slr'"),
        ([{"name": "routing"}, {"name": "routing", "layers": [0]}], "'routing' and 'routing'"),
        (
            [{"name": "rhe", "layers": [0]}, {"name": "pascal", "layers": "all"}],
            "'rhe' and 'pascal'",
        ),
    ],
)
def test_two_variants_that_replace_the_same_part_are_refused(m30k, specs, needle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=needle):
        tiny_config(m30k, model={"heads": 8}, attention={"enc_self": specs})
    # biases and observers compose with a replacing variant
    gated = {"name": "slr", "options": {"mode": "gated"}}
    ok = [{"name": "dea"}, {"name": "disagreement"}, gated]
    tiny_config(m30k, model={"heads": 8}, attention={"enc_self": ok})


def test_prewarm_fraction_freezes_the_gate_for_that_share_of_the_run(m30k, corpus_and_tok) -> None:  # type: ignore[no-untyped-def]
    corpus, tok = corpus_and_tok
    cfg = preset_config(m30k, "slr-gated")
    model = Transformer(cfg, tok.get_vocab_size()).train()
    model.state.max_updates = 10
    batch = make_batch(corpus, [0, 1, 2], model.feature_requests())
    gate = model.encoder[0].self_attn.variant.gate

    def gate_grad(update: int) -> bool:
        model.zero_grad()
        model.state.update = update
        model(batch.src, batch.tgt_in, batch.syntax).sum().backward()
        return gate.fc1.weight.grad is not None and bool(gate.fc1.weight.grad.abs().sum() > 0)

    assert not gate_grad(3)  # 3 < 0.4 * 10: frozen
    assert gate_grad(4)
