"""The speed-ups of the training step and the decoder compute what the plain code computed:
one log-softmax for both loss sums, logits only at scored positions, fused projections, the
cheaper CPU dropout mask, and the batched beam search against the per-sentence reference."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from synattn_trainer import dropout as D
from synattn_trainer.config import DecodeConfig, TrainConfig
from synattn_trainer.data import load_corpus, make_batch
from synattn_trainer.decode import _max_len, _select, beam_search, length_penalty, translate_corpus
from synattn_trainer.model import Transformer, reorder_cache
from synattn_trainer.tokenizer import BOS_ID, EOS_ID, PAD_ID, load_tokenizer
from synattn_trainer.train import Trainer, token_loss
from tests.trainer.conftest import tiny_config


def test_token_loss_is_torchs_label_smoothing_and_nll() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 50, dtype=torch.float64, requires_grad=True)
    gold = torch.randint(4, 50, (3, 7))
    gold[0, 5:] = PAD_ID
    gold[2, 3:] = PAD_ID
    loss, nll = token_loss(logits, gold, 0.1)
    flat, g = logits.view(-1, 50), gold.view(-1)
    ref = F.cross_entropy(flat, g, ignore_index=PAD_ID, label_smoothing=0.1, reduction="sum")
    ref_nll = F.cross_entropy(flat, g, ignore_index=PAD_ID, reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6) and not nll.requires_grad
    (grad,) = torch.autograd.grad(loss, logits)
    (ref_grad,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-6)
    plain, _ = token_loss(logits, gold, 0.0)
    assert plain.item() == pytest.approx(ref_nll.item(), rel=1e-6)


def _model(m30k: dict[str, Path], **model: Any) -> tuple[Transformer, TrainConfig]:
    cfg = tiny_config(m30k, model=model) if model else tiny_config(m30k)
    torch.manual_seed(3)
    return Transformer(cfg, load_tokenizer(m30k["tokenizer"]).get_vocab_size()), cfg


def test_logits_at_positions_are_the_full_logits_there(m30k: dict[str, Path]) -> None:
    model, cfg = _model(m30k)
    model.eval()
    corpus = load_corpus(m30k["valid"], load_tokenizer(cfg.data.tokenizer))
    b = make_batch(corpus, list(range(8)))
    positions = b.tgt_out.ne(PAD_ID)
    full = model(b.src, b.tgt_in)
    some = model(b.src, b.tgt_in, None, b.scored)  # the non-padding targets, found on the host
    assert some.shape == (int(positions.sum()), full.shape[-1])
    torch.testing.assert_close(some, full[positions])
    assert torch.equal(b.gold, b.tgt_out[positions]) and b.ntokens == int(positions.sum())


def test_fused_projections_equal_the_three_linear_layers(m30k: dict[str, Path]) -> None:
    model, _ = _model(m30k)
    attn = model.decoder[0].self_attn
    x, mem = torch.randn(2, 5, 32), torch.randn(2, 9, 32)
    q, k, v = attn._project(x, x)
    torch.testing.assert_close(q, attn._split(attn.q_proj(x)))
    torch.testing.assert_close(k, attn._split(attn.k_proj(x)))
    torch.testing.assert_close(v, attn._split(attn.v_proj(x)))
    q, k, v = attn._project(x, mem)
    torch.testing.assert_close(q, attn._split(attn.q_proj(x)))
    torch.testing.assert_close(k, attn._split(attn.k_proj(mem)))
    torch.testing.assert_close(v, attn._split(attn.v_proj(mem)))
    names = {n for n, _ in model.named_parameters()}
    assert "decoder.0.self_attn.q_proj.weight" in names  # checkpoints keep their names


def test_fast_dropout_draws_are_uniform_and_unbiased() -> None:
    torch.manual_seed(0)
    n = 400_000
    ones = torch.ones(n)
    y = D.dropout(ones, 0.1)
    dropped = y.eq(0)
    # every one of the four 16-bit draws a 64-bit word gives drops at the same rate
    for lane in range(4):
        assert dropped[lane::4].float().mean().item() == pytest.approx(0.1, abs=0.004)
    assert y.mean().item() == pytest.approx(1.0, abs=0.005)  # scaled by 1 / (1 - p')
    values = torch.unique(y).tolist()
    assert values[0] == 0.0 and values[1:] == [pytest.approx(65536 / (65536 - 6554))]
    torch.manual_seed(5)
    a = D.dropout(torch.ones(1000), 0.3)
    torch.manual_seed(5)
    assert torch.equal(a, D.dropout(torch.ones(1000), 0.3))  # the seed decides, as before


def test_fast_dropout_gradient_is_its_mask_and_off_is_identity() -> None:
    x = torch.randn(64, 33, requires_grad=True)
    y = D.dropout(x, 0.25)
    y.sum().backward()
    assert x.grad is not None
    keep = y.detach() != 0
    torch.testing.assert_close(x.grad[keep], (y.detach() / x.detach())[keep])
    assert torch.all(x.grad[~keep] == 0)
    assert D.dropout(x, 0.25, training=False) is x and D.dropout(x, 0.0) is x
    m = D.Dropout(0.5).eval()
    assert m(x) is x


def test_fast_dropout_switch_restores_torchs_dropout() -> None:
    x = torch.ones(10_000)
    D.use_fast(False)
    try:
        torch.manual_seed(1)
        a = D.dropout(x, 0.1)
        torch.manual_seed(1)
        assert torch.equal(a, F.dropout(x, 0.1, True))
    finally:
        D.use_fast(True)


def test_trainer_sets_the_dropout_kernel(m30k: dict[str, Path], tmp_path: Path) -> None:
    cfg = tiny_config(m30k, train={"fast_dropout": False, "max_updates": 1})
    try:
        Trainer(cfg, tmp_path / "run", progress=False)
        assert not D.fast_on(torch.device("cpu"))
    finally:
        D.use_fast(True)


def test_cudnn_attention_is_a_cuda_setting_only(m30k: dict[str, Path], tmp_path: Path) -> None:
    """``train.cudnn_attention`` (off by default) flips torch's process-wide cuDNN SDPA switch
    on a CUDA device only: a CPU trainer or a CPU model leaves it as it was."""
    from synattn_trainer.config import TrainLoopConfig
    from synattn_trainer.model import use_cudnn_attention

    assert TrainLoopConfig().cudnn_attention is False
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        use_cudnn_attention(False)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        use_cudnn_attention(True)
        assert torch.backends.cuda.cudnn_sdp_enabled()
        Trainer(tiny_config(m30k, train={"max_updates": 1}), tmp_path / "run", progress=False)
        assert torch.backends.cuda.cudnn_sdp_enabled()  # the CPU left it alone
    finally:
        use_cudnn_attention(before)


def reference_beam_search(
    model: Transformer, src: torch.Tensor, beam: int, lenpen: float, form: str, b_: int
) -> list[list[int]]:
    """A per-sentence loop over the ranked candidates (the loop ``beam_search`` replaced, with
    fairseq's rule that only a ``</s>`` among the first ``beam`` finishes): the oracle."""
    b, k = src.shape[0], beam
    enc = _select(model.encode(src), torch.arange(b).repeat_interleave(k))
    ys = torch.full((b * k, 1), BOS_ID, dtype=torch.long)
    scores = torch.zeros(b, k)
    scores[:, 1:] = -float("inf")
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    active = [True] * b
    steps = _max_len(src, 1.0, b_)
    cache: list[dict[str, Any]] = []
    for step in range(steps):
        logp = F.log_softmax(model.decode_step(ys, enc, cache).float(), -1)
        vocab = logp.shape[-1]
        top_s, top_i = (scores.view(-1, 1) + logp).view(b, k * vocab).topk(2 * k, dim=1)
        origin, token = top_i // vocab, top_i % vocab
        new_scores = torch.full((b, k), -float("inf"))
        new_origin = torch.zeros(b, k, dtype=torch.long)
        new_token = torch.full((b, k), PAD_ID, dtype=torch.long)
        for s in range(b):
            if not active[s]:
                continue
            filled = 0
            for r, (score, o, t) in enumerate(
                zip(top_s[s].tolist(), origin[s].tolist(), token[s].tolist(), strict=True)
            ):
                if score == -float("inf"):
                    break
                if t == EOS_ID or step == steps - 1:
                    if r < k and len(finished[s]) < k:
                        hyp = ys[s * k + o, 1:].tolist() + ([] if t == EOS_ID else [t])
                        norm = score / length_penalty(len(hyp) + 1, lenpen, form)
                        finished[s].append((norm, hyp))
                    continue
                if filled < k:
                    new_scores[s, filled] = score
                    new_origin[s, filled], new_token[s, filled] = o, t
                    filled += 1
            if len(finished[s]) >= k or filled == 0:
                active[s] = False
        if not any(active):
            break
        rows = (torch.arange(b)[:, None] * k + new_origin).view(-1)
        ys = torch.cat([ys.index_select(0, rows), new_token.view(-1, 1)], 1)
        reorder_cache(cache, rows, rows)
        scores = new_scores
        scores[torch.tensor([not a for a in active])] = -float("inf")
    return [max(f, key=lambda x: x[0])[1] if f else [] for f in finished]


@pytest.mark.parametrize(
    ("beam", "lenpen", "form", "eos_bias"),
    [(1, 1.0, "average", 2.2), (4, 1.0, "average", 2.4), (5, 0.6, "gnmt", 2.0),
     (3, 1.0, "average", -5.0), (5, 1.2, "average", 2.6)],
)  # fmt: skip
def test_batched_beam_search_equals_the_per_sentence_search(
    m30k: dict[str, Path], beam: int, lenpen: float, form: str, eos_bias: float
) -> None:
    """An untrained model with a bias towards (or against) </s>: sentences finish at many
    different steps, some only at the length limit."""
    model, cfg = _model(m30k, output_bias=True)
    with torch.no_grad():
        assert model.out_bias is not None
        model.out_bias[EOS_ID] = eos_bias
    model.eval()
    corpus = load_corpus(m30k["valid"], load_tokenizer(cfg.data.tokenizer))
    b = make_batch(corpus, list(range(24)))
    got = beam_search(model, b.src, None, beam, lenpen, form, 1.0, 6)
    assert got == reference_beam_search(model, b.src, beam, lenpen, form, 6)
    assert len({len(h) for h in got}) > 1 or beam == 1 or eos_bias < 0


def test_translate_corpus_sorts_by_length_and_keeps_row_order(
    m30k: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, cfg = _model(m30k)
    tok = load_tokenizer(cfg.data.tokenizer)
    corpus = load_corpus(m30k["valid"], tok)
    seen: list[list[int]] = []

    def echo(model: Transformer, src: torch.Tensor, *args: Any) -> list[list[int]]:
        """Each row's source ids: the output says which row it came from."""
        lengths = src.ne(PAD_ID).sum(1).tolist()
        seen.append(lengths)
        return [row[: n - 1] for row, n in zip(src.tolist(), lengths, strict=True)]

    monkeypatch.setattr("synattn_trainer.decode.beam_search", echo)
    out = translate_corpus(model, corpus, tok, DecodeConfig(batch_sentences=7), limit=30)
    expected = [tok.decode(corpus.src[i][:-1].tolist()) for i in range(30)]
    assert out == expected  # row order
    flat = [n for batch in seen for n in batch]
    assert flat == sorted(flat) and [len(x) for x in seen] == [7, 7, 7, 7, 2]


def test_decoding_sees_weights_changed_by_fused_adam(m30k: dict[str, Path]) -> None:
    """Fused Adam updates parameters without bumping their version counters, so the stacked
    projection weights a decoding call keeps must not outlive the call."""
    import copy

    from synattn_trainer.decode import greedy

    model, cfg = _model(m30k)
    model.eval()
    corpus = load_corpus(m30k["valid"], load_tokenizer(cfg.data.tokenizer))
    src = make_batch(corpus, list(range(6))).src
    greedy(model, src, max_len_b=5)  # keeps stacked copies during the call
    opt = torch.optim.Adam(model.parameters(), lr=0.5, fused=True)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    fresh = copy.deepcopy(model)
    for _, _, mod in fresh.attention_modules():
        mod._stacked.clear()
    assert greedy(model, src, max_len_b=5) == greedy(fresh, src, max_len_b=5)


def test_compile_switch_wraps_the_training_forward(
    m30k: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fx_config_restored: ModuleType,
) -> None:
    """``train.compile`` hands the training module to ``torch.compile`` (spied on here: a real
    compilation takes minutes on two cores; bench/peers/peer.py --compile measures it), with sizes
    symbolic and no duck sizing."""
    seen: list[dict[str, Any]] = []

    def spy(module: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
        seen.append(kwargs)
        return module

    monkeypatch.setattr(torch, "compile", spy)
    Trainer(tiny_config(m30k), tmp_path / "eager", progress=False)
    assert seen == []
    trainer = Trainer(tiny_config(m30k, train={"compile": True}), tmp_path / "c", progress=False)
    assert seen == [{"backend": "inductor", "dynamic": True}] and trainer.net is trainer.model
    assert fx_config_restored.use_duck_shape is False


def test_hypotheses_sharing_one_source_copy_give_the_same_logits(
    m30k: dict[str, Path],
) -> None:
    """``beams_share_source``: cross-attention of k hypotheses to one copy of their source
    equals attention from k copies, step by step."""
    model, cfg = _model(m30k)
    model.eval()
    assert model.beams_share_source()
    corpus = load_corpus(m30k["valid"], load_tokenizer(cfg.data.tokenizer))
    src = make_batch(corpus, list(range(5))).src
    k = 3
    with torch.inference_mode():
        model.start_decoding()
        enc = model.encode(src)
        wide = _select(enc, torch.arange(5).repeat_interleave(k))
        prefix = torch.randint(4, 50, (5 * k, 4))
        prefix[:, 0] = BOS_ID
        shared_cache: list[dict[str, Any]] = []
        copied_cache: list[dict[str, Any]] = []
        for t in range(1, 5):
            a = model.decode_step(prefix[:, :t], enc, shared_cache, beam=k)
            b = model.decode_step(prefix[:, :t], wide, copied_cache)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert shared_cache[0]["cross"]["k"].shape[0] == 5  # one row per sentence


def test_variants_and_analysis_keep_one_source_copy_per_hypothesis(
    m30k: dict[str, Path],
) -> None:
    model, _ = _model(m30k)
    model.decoder[0].self_attn.keep_probs = True
    assert not model.beams_share_source()
    for kind, name in (("enc_dec", "localness"), ("dec_self", "rel_pos")):
        cfg = tiny_config(m30k, attention={kind: [{"name": name}]})
        assert not Transformer(cfg, 600).beams_share_source()
    enc_only = Transformer(tiny_config(m30k, attention={"enc_self": [{"name": "dea"}]}), 600)
    assert enc_only.beams_share_source()  # the encoder's variants do not matter


def test_batched_beam_search_with_a_cross_attention_variant(m30k: dict[str, Path]) -> None:
    """The path that keeps one source copy per hypothesis (a variant on enc_dec)."""
    cfg = tiny_config(
        m30k, model={"output_bias": True}, attention={"enc_dec": [{"name": "localness"}]}
    )
    torch.manual_seed(3)
    model = Transformer(cfg, load_tokenizer(m30k["tokenizer"]).get_vocab_size()).eval()
    assert not model.beams_share_source()
    with torch.no_grad():
        assert model.out_bias is not None
        model.out_bias[EOS_ID] = 2.4
    corpus = load_corpus(m30k["valid"], load_tokenizer(cfg.data.tokenizer))
    b = make_batch(corpus, list(range(24)))
    got = beam_search(model, b.src, None, 4, 1.0, "average", 1.0, 6)
    assert got == reference_beam_search(model, b.src, 4, 1.0, "average", 6)
    assert len({len(h) for h in got}) > 1


@pytest.mark.parametrize("form", ["average", "gnmt"])
def test_length_penalty_of_a_tensor_is_the_penalty_of_each_length(form: str) -> None:
    lengths = torch.tensor([1, 2, 7, 30])
    expected = [length_penalty(int(n), 0.6, form) for n in lengths]
    got = length_penalty(lengths, 0.6, form)
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx(expected, rel=1e-12)
    assert length_penalty(4, 1.0, "average") == 4.0
    assert length_penalty(1, 1.0, "gnmt") == 1.0  # (5 + 1) / 6
