"""Batched greedy and beam search, and forced-decoding scores of given translations.

Decoding is incremental: each step computes only the newest position and reuses the cached keys
and values of the prefix (``Transformer.decode_step``); a test checks it against full decoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from synattn_trainer.model import Encoded, Transformer, reorder_cache
from synattn_trainer.tokenizer import BOS_ID, EOS_ID, PAD_ID

if TYPE_CHECKING:
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


@torch.no_grad()
def greedy(
    model: Transformer,
    src: Tensor,
    syntax: Features | None = None,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[list[int]]:
    """Most probable next token at every step; returns ids without ``<s>``/``</s>``."""
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


def length_penalty(length: int, alpha: float, form: str) -> float:
    """Score divisor: ``length ** alpha`` (average) or GNMT's ``((5 + length) / 6) ** alpha``."""
    if form == "gnmt":
        return float(((5 + length) / 6) ** alpha)
    return float(length**alpha)


@torch.no_grad()
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
    """
    b = src.shape[0]
    k = beam
    device = src.device
    enc = _select(model.encode(src, syntax), torch.arange(b, device=device).repeat_interleave(k))
    ys = torch.full((b * k, 1), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(b, k, device=device)
    scores[:, 1:] = -float("inf")  # step 0: only the first copy of each sentence is live
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    active = [True] * b
    steps = _max_len(src, max_len_a, max_len_b)
    cache: list[dict[str, Any]] = []
    for step in range(steps):
        logp = F.log_softmax(model.decode_step(ys, enc, cache).float(), -1)  # [b*k, V]
        vocab = logp.shape[-1]
        cand = (scores.view(-1, 1) + logp).view(b, k * vocab)
        top_s, top_i = cand.topk(2 * k, dim=1)
        origin = top_i // vocab
        token = top_i % vocab
        new_scores = torch.full((b, k), -float("inf"), device=device)
        new_origin = torch.zeros(b, k, dtype=torch.long, device=device)
        new_token = torch.full((b, k), PAD_ID, dtype=torch.long, device=device)
        top_s_l, origin_l, token_l = top_s.tolist(), origin.tolist(), token.tolist()
        for s in range(b):
            if not active[s]:
                continue
            filled = 0
            for score, o, t in zip(top_s_l[s], origin_l[s], token_l[s], strict=True):
                if score == -float("inf"):
                    break
                if t == EOS_ID or step == steps - 1:
                    hyp = ys[s * k + o, 1:].tolist() + ([] if t == EOS_ID else [t])
                    norm = score / length_penalty(len(hyp) + 1, lenpen, lenpen_form)
                    finished[s].append((norm, hyp))
                    if len(finished[s]) >= k:
                        break
                    continue
                if filled < k:
                    new_scores[s, filled] = score
                    new_origin[s, filled] = o
                    new_token[s, filled] = t
                    filled += 1
            if len(finished[s]) >= k or filled == 0:
                active[s] = False
        if not any(active):
            break
        rows = (torch.arange(b, device=device)[:, None] * k + new_origin).view(-1)
        ys = torch.cat([ys.index_select(0, rows), new_token.view(-1, 1)], 1)
        reorder_cache(cache, rows)
        scores = new_scores
        inactive = torch.tensor([not a for a in active], device=device)
        scores[inactive] = -float("inf")
    out = []
    for s in range(b):
        if finished[s]:
            out.append(max(finished[s], key=lambda x: x[0])[1])
        else:
            out.append([])
    return out


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


@torch.no_grad()
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
) -> list[str]:
    """The one translate loop: beam search over a corpus in batches of
    ``settings.batch_sentences``, detokenised, in row order (``beam``/``lenpen`` override the
    config's). The model is left in eval mode; callers that train restore train mode."""
    from synattn_trainer.data import make_batch
    from synattn_trainer.tokenizer import decode

    model.eval()
    n = len(corpus) if limit is None else min(limit, len(corpus))
    requests = model.feature_requests()
    out: list[str] = []
    for start in range(0, n, settings.batch_sentences):
        index = list(range(start, min(n, start + settings.batch_sentences)))
        b = make_batch(corpus, index, requests)
        if device is not None:
            b = b.to(device)
        ids = beam_search(
            model, b.src, b.syntax, settings.beam if beam is None else beam,
            settings.lenpen if lenpen is None else lenpen, settings.lenpen_form,
            settings.max_len_a, settings.max_len_b,
        )  # fmt: skip
        out.extend(decode(tok, ids))
    return out
