"""The training criterion and the losses read off a corpus: label-smoothed cross-entropy with
its gradient in one pass, and the loss and NLL per target token over a whole split. The
trainer's validation (all heads, and HeadMask's pass with heads masked as in training) and the
diagnosis of a finished HeadMask model read a split with the same loop, so their numbers are
the same kind of number."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from synattn_trainer.data import Batch, Corpus, make_batch, token_batches
from synattn_trainer.tokenizer import PAD_ID


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Label-smoothed cross-entropy summed over non-padding rows, with its gradient written in
    one pass: ``softmax - (1 - eps) * onehot - eps / V`` per kept row. Autograd through
    ``log_softmax``, ``nll_loss`` and a sum fills a zero matrix, scatters, expands and runs the
    log-softmax backward, several passes over a ``[tokens, vocabulary]`` matrix, which on a CPU
    is a tenth of a small model's update (bench/peers/peer.py). Returns (loss, nll); the NLL
    carries no gradient."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, gold: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
        lp = F.log_softmax(logits, dim=-1)
        keep = gold.ne(PAD_ID)
        safe = gold.masked_fill(~keep, 0)[:, None]
        nll_tok = -lp.gather(1, safe).squeeze(1)
        nll = (nll_tok * keep).sum()
        loss = nll
        if smoothing:
            uniform = -(lp.sum(-1) * keep).sum()
            loss = (1.0 - smoothing) * nll + (smoothing / lp.shape[-1]) * uniform
        ctx.save_for_backward(lp, safe, keep)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None]:
        lp, safe, keep = ctx.saved_tensors
        eps = ctx.smoothing
        grad = lp.exp()  # softmax
        if eps:
            grad.sub_(eps / lp.shape[-1])
        grad.scatter_add_(1, safe, torch.full_like(safe, -(1.0 - eps), dtype=grad.dtype))
        grad.mul_((keep.to(grad.dtype) * grad_loss)[:, None])
        return grad, None, None


def token_loss(logits: Tensor, gold: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-padding tokens.

    With ``eps`` = ``smoothing`` and V classes the loss is ``(1 - eps) * nll + eps / V *
    sum_v -log p_v``, PyTorch's label smoothing; one log-softmax serves both sums and the
    gradient is computed directly (``_SmoothedCrossEntropy``). ``logits`` may be ``[..., V]``
    with ``gold`` of the same leading shape; the NLL carries no gradient.
    """
    flat = logits.float().reshape(-1, logits.shape[-1])
    loss, nll = _SmoothedCrossEntropy.apply(flat, gold.reshape(-1), smoothing)  # type: ignore[no-untyped-call]
    return loss, nll


@torch.no_grad()
def corpus_losses(
    model: Any,
    data: Corpus,
    requests: Any,
    max_tokens: int,
    device: torch.device,
    smoothing: float,
    gates: Callable[[Batch, int], Tensor | None] | None = None,
) -> tuple[float, float]:
    """Label-smoothed loss and NLL per target token over ``data``, in the model's current mode
    (a caller wanting eval mode sets it); ``gates(batch, i)`` gates each batch's heads
    (HeadMask), ``None`` for all heads on."""
    loss_sum = nll_sum = tokens = 0.0
    for i, index in enumerate(
        token_batches(data.src_lens(), data.tgt_lens() - 1, max_tokens, 0, -1)
    ):
        b = make_batch(data, index, requests).to(device)
        model.set_head_gates(None if gates is None else gates(b, i))
        try:
            logits = model(b.src, b.tgt_in, b.syntax, b.scored)
        finally:
            model.set_head_gates(None)
        loss, nll = token_loss(logits, b.gold, smoothing)
        loss_sum += float(loss)
        nll_sum += float(nll)
        tokens += b.ntokens
    return loss_sum / tokens, nll_sum / tokens
