"""Batched greedy and beam search, and forced-decoding scores of given translations.

Decoding is incremental: each step computes only the newest position and reuses the cached keys
and values of the prefix (``Transformer.decode_step``); a test checks it against full decoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from synattn_trainer.model import Encoded, Transformer, reorder_cache
from synattn_trainer.tokenizer import BOS_ID, EOS_ID, PAD_ID

if TYPE_CHECKING:
    from collections.abc import Callable

    from tokenizers import Tokenizer

    from synattn_trainer.config import DecodeConfig
    from synattn_trainer.data import Corpus, Features


def _max_len(src: Tensor, a: float, b: int) -> int:
    return int(src.ne(PAD_ID).sum(1).max().item() * a + b)


def _select(enc: Encoded, index: Tensor) -> Encoded:
    return Encoded(
        enc.memory.index_select(0, index),
        enc.src_pad.index_select(0, index),
        enc.src_eos.index_select(0, index),
        {k: v.index_select(0, index) for k, v in enc.syntax.items()},
    )


@torch.inference_mode()
def greedy(
    model: Transformer,
    src: Tensor,
    syntax: Features | None = None,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[list[int]]:
    """Most probable next token at every step; returns ids without ``<s>``/``</s>``."""
    model.start_decoding()
    enc = model.encode(src, syntax)
    b = src.shape[0]
    ys = torch.full((b, 1), BOS_ID, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    cache: list[dict[str, Any]] = []
    for _ in range(_max_len(src, max_len_a, max_len_b)):
        logits = model.decode_step(ys, enc, cache)
        nxt = logits.argmax(-1).masked_fill(done, PAD_ID)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt.eq(EOS_ID)
        if bool(done.all()):
            break
    return [_strip(row) for row in ys[:, 1:].tolist()]


def _strip(ids: list[int]) -> list[int]:
    out = []
    for t in ids:
        if t in (EOS_ID, PAD_ID):
            break
        out.append(t)
    return out


@overload
def length_penalty(length: int, alpha: float, form: str) -> float: ...
@overload
def length_penalty(length: Tensor, alpha: float, form: str) -> Tensor: ...
def length_penalty(length: int | Tensor, alpha: float, form: str) -> float | Tensor:
    """Score divisor: ``length ** alpha`` (average) or GNMT's ``((5 + length) / 6) ** alpha``;
    of one length, or of each in a tensor (float64)."""
    x = length.double() if isinstance(length, Tensor) else float(length)
    return ((5 + x) / 6) ** alpha if form == "gnmt" else x**alpha


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    syntax: Features | None = None,
    beam: int = 5,
    lenpen: float = 1.0,
    lenpen_form: str = "average",
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[list[int]]:
    """Beam search over a batch; a sentence stops once it has ``beam`` finished hypotheses.

    Hypothesis scores are summed log-probabilities; finished ones are ranked by score divided by
    ``length_penalty(len + 1, lenpen)`` (the ``</s>`` counts). Beam 1 equals greedy.

    Each step ranks the ``2 * beam`` best continuations of every sentence: a ``</s>`` among the
    first ``beam`` finishes a hypothesis (at the last step each of the first ``beam`` does),
    the best ``beam`` that do not end stay live, and a sentence is done once it has ``beam``
    finished hypotheses (fairseq's rule; a ``</s>`` ranked below every live continuation no
    longer ends the search, so beam 1 is exactly greedy).
    The whole batch does this with tensor operations, with no loop over sentences or
    hypotheses; finished sentences leave the batch (their rows of the encoder output and of the
    cached keys and values are dropped), so later steps cost what the unfinished ones need.
    """
    b, k, device = src.shape[0], beam, src.device
    steps = _max_len(src, max_len_a, max_len_b)
    model.start_decoding()
    # plain decoder attention: one copy of each source serves all its hypotheses
    shared = k > 1 and model.beams_share_source()
    enc = model.encode(src, syntax)
    if not shared:
        enc = _select(enc, torch.arange(b, device=device).repeat_interleave(k))
    ys = torch.full((b * k, 1), BOS_ID, dtype=torch.long, device=device)
    scores = torch.full((b, k), -float("inf"), device=device)
    scores[:, 0] = 0.0  # step 0: only the first copy of each sentence is live
    # finished hypotheses of every sentence, in the order they finished (ties: the first wins)
    fin_score = torch.full((b, k), -float("inf"), dtype=torch.float64, device=device)
    fin_tokens = torch.full((b, k, steps + 1), PAD_ID, dtype=torch.long, device=device)
    fin_len = torch.zeros((b, k), dtype=torch.long, device=device)
    fin_count = torch.zeros(b, dtype=torch.long, device=device)
    alive = torch.arange(b, device=device)  # original index of each sentence still searched
    rank = torch.arange(2 * k, device=device)
    cache: list[dict[str, Any]] = []
    for step in range(steps):
        n = alive.shape[0]
        logits = model.decode_step(ys, enc, cache, k if shared else 1).float()  # [n*k, V]
        # the 2k best of a sentence are among the 2k best of each of its hypotheses: rank each
        # row, then the sentence's k * 2k candidates (not k * V sums). log_softmax is one fused
        # pass; logsumexp, which would spare writing [n*k, V], takes twice as long on the CPU
        row_logp, row_tok = F.log_softmax(logits, -1).topk(2 * k, dim=1)
        cand = (scores.view(-1, 1) + row_logp).view(n, k * 2 * k)
        top_s, top_i = cand.topk(2 * k, dim=1)
        origin = top_i // (2 * k)
        token = row_tok.view(n, k * 2 * k).gather(1, top_i)
        valid = top_s > -float("inf")
        is_eos = token.eq(EOS_ID)
        # a </s> among the best ``beam`` candidates finishes a hypothesis (fairseq's rule; at the
        # last step every one of them finishes), up to ``beam`` finished per sentence
        ends = valid & rank[: 2 * k].lt(k) & (is_eos if step < steps - 1 else valid)
        done_before = fin_count[alive, None]
        finish = ends & (done_before + ends.cumsum(1)).le(k)
        live = valid & ~is_eos
        live &= live.cumsum(1) <= k  # the best ``beam`` continuations that do not end
        # finished hypotheses: the origin's prefix, plus the token unless it is </s>
        if bool(finish.any()):
            sent, col = finish.nonzero(as_tuple=True)
            rows = sent * k + origin[sent, col]
            tok = token[sent, col]
            hyp = torch.full((sent.shape[0], steps + 1), PAD_ID, dtype=torch.long, device=device)
            hyp[:, :step] = ys[rows, 1:]
            eos = tok.eq(EOS_ID)
            hyp[:, step] = tok.masked_fill(eos, PAD_ID)
            length = step + 1 + (~eos).long()  # hypothesis + </s>
            norm = top_s[sent, col].double() / length_penalty(length, lenpen, lenpen_form)
            slot = done_before[sent, 0] + (finish.cumsum(1)[sent, col] - 1)
            fin_score[alive[sent], slot] = norm
            fin_tokens[alive[sent], slot] = hyp
            fin_len[alive[sent], slot] = length - 1
            fin_count.index_add_(0, alive[sent], torch.ones_like(sent))
        # a sentence is done with k finished, or when no live continuation is left
        keep = fin_count[alive].lt(k) & live.any(1)
        if not bool(keep.any()):
            break
        # the live candidates of the sentences that go on, packed into the first slots
        live, top_s, origin, token = live[keep], top_s[keep], origin[keep], token[keep]
        order = torch.where(live, rank, rank + 2 * k).argsort(1)[:, :k]
        filled = live.gather(1, order)
        new_scores = top_s.gather(1, order).masked_fill(~filled, -float("inf"))
        new_origin = origin.gather(1, order).masked_fill(~filled, 0)
        new_token = token.gather(1, order).masked_fill(~filled, PAD_ID)
        kept = keep.nonzero(as_tuple=True)[0]
        rows = (kept[:, None] * k + new_origin).view(-1)
        static = None  # the source rows of the sentences that stay, when some leave
        if kept.shape[0] < n:
            static = kept if shared else (kept[:, None] * k + torch.arange(k, device=device))
            static = static.view(-1)
            enc = _select(enc, static)
            alive = alive[kept]
        ys = torch.cat([ys.index_select(0, rows), new_token.view(-1, 1)], 1)
        reorder_cache(cache, rows, static)
        scores = new_scores
    pick = (torch.arange(b, device=device), fin_score.argmax(1))
    lengths = fin_len[pick].masked_fill(fin_count.eq(0), 0).tolist()
    return [t[:n] for t, n in zip(fin_tokens[pick].tolist(), lengths, strict=True)]


@torch.no_grad()
def forced_scores(
    model: Transformer, src: Tensor, tgt: Tensor, syntax: Features | None = None
) -> list[float]:
    """Sum of log-probabilities of given ``<s> y </s>`` translations (contrastive scoring)."""
    logits = model(src, tgt[:, :-1], syntax)
    logp = F.log_softmax(logits.float(), -1)
    gold = tgt[:, 1:]
    tok = logp.gather(-1, gold.unsqueeze(-1)).squeeze(-1).masked_fill(gold.eq(PAD_ID), 0.0)
    return tok.sum(1).tolist()


@torch.inference_mode()
def translate_corpus(
    model: Transformer,
    corpus: Corpus,
    tok: Tokenizer,
    settings: DecodeConfig,
    *,
    beam: int | None = None,
    lenpen: float | None = None,
    limit: int | None = None,
    device: torch.device | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> list[str]:
    """The one translate loop: beam search over a corpus in batches of
    ``settings.batch_sentences``, detokenised, in row order (``beam``/``lenpen`` override the
    config's). Batches are made of sentences of similar source length (as ``fairseq-generate``
    makes them), so little of a batch is padding and its sentences finish at similar steps.
    ``on_batch(sentences, total)`` is called after each batch (progress). The model is left in
    eval mode; callers that train restore train mode."""
    from synattn_trainer.data import make_batch
    from synattn_trainer.tokenizer import decode

    model.eval()
    n = len(corpus) if limit is None else min(limit, len(corpus))
    requests = model.feature_requests()
    order = np.argsort(corpus.src_lens()[:n], kind="stable").tolist()  # by length, then row
    ids: list[list[int]] = [[] for _ in range(n)]
    for start in range(0, n, settings.batch_sentences):
        index = order[start : start + settings.batch_sentences]
        b = make_batch(corpus, index, requests)
        if device is not None:
            b = b.to(device)
        out = beam_search(
            model, b.src, b.syntax, settings.beam if beam is None else beam,
            settings.lenpen if lenpen is None else lenpen, settings.lenpen_form,
            settings.max_len_a, settings.max_len_b,
        )  # fmt: skip
        for i, hyp in zip(index, out, strict=True):
            ids[i] = hyp
        if on_batch is not None:
            on_batch(len(index), n)
    return decode(tok, ids)
