"""Head importance and HeadMask training (Sun et al. 2022; docs/papers/headmask.md).

Importance is ``I_g = mean_x |dL(x)/d xi_g|`` at ``xi = 1``: one backward to a ``[B, G]`` gate
tensor gives every sentence's value at once (sentences do not interact), and
``torch.autograd.grad`` leaves the parameters' gradients untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from synattn_trainer.config import HeadMaskConfig
from synattn_trainer.data import Batch
from synattn_trainer.model import Transformer


def per_sentence_loss(model: Transformer, batch: Batch, smoothing: float = 0.0) -> Tensor:
    """``[B]`` summed token cross-entropy of each sentence (the analysis loss when smoothing=0)."""
    logits = model(batch.src, batch.tgt_in, batch.syntax)
    if logits.dtype != torch.float64:
        logits = logits.float()
    b, t, v = logits.shape
    tok = torch.nn.functional.cross_entropy(
        logits.view(-1, v), batch.tgt_out.reshape(-1), ignore_index=0,
        label_smoothing=smoothing, reduction="none",
    ).view(b, t)  # fmt: skip
    return tok.sum(1)


def sentence_importance(
    model: Transformer,
    batch: Batch,
    loss_fn: Callable[[Transformer, Batch], Tensor] = per_sentence_loss,
    absolute: bool = True,
) -> Tensor:
    """``[B, G]`` ``|dL(x_b)/d xi_g|`` at ``xi = 1`` (signed with ``absolute=False``)."""
    gates = torch.ones(
        batch.src.shape[0], model.num_heads, requires_grad=True, device=batch.src.device
    )
    model.set_head_gates(gates)
    try:
        loss = loss_fn(model, batch).sum()
        (grad,) = torch.autograd.grad(loss, [gates])
    finally:
        model.set_head_gates(None)
    return grad.abs() if absolute else grad


def normalise_by_layer(
    importance: np.ndarray | list[float], heads_per_module: int | list[int]
) -> np.ndarray:
    """Michel et al.: each module's scores divided by their L2 norm (``+1e-20``).

    ``heads_per_module``: one count for all modules, or each module's count in global head
    order (the 1L baseline has one encoder head per layer beside 8-head decoder modules).
    """
    x = np.asarray(importance, dtype=np.float64)
    sizes = (
        [heads_per_module] * (len(x) // heads_per_module)
        if isinstance(heads_per_module, int)
        else list(heads_per_module)
    )
    if sum(sizes) != len(x):
        raise ValueError(f"{len(x)} scores for modules of {sizes} heads")
    out = np.empty_like(x)
    start = 0
    for n in sizes:
        seg = x[start : start + n]
        out[start : start + n] = seg / (np.linalg.norm(seg) + 1e-20)
        start += n
    return out


def select_important(importance: np.ndarray | Tensor, n: int) -> list[int]:
    """The ``n`` most important heads, stable (ties: lower index first)."""
    imp = np.asarray(importance.detach().cpu() if isinstance(importance, Tensor) else importance)
    order = np.argsort(-imp, kind="stable")
    return sorted(order[:n].tolist())


def impt_scores(
    signed: Tensor,
    importance: Literal["absolute", "batch_absolute", "signed"] = "absolute",
    ranking: Literal["global", "per_module"] = "global",
    module_sizes: Sequence[int] = (),
) -> Tensor | np.ndarray:
    """``[G]`` what Impt-N ranks heads by, from the ``[B, G]`` per-sentence ``dL(x_b)/d xi``.

    ``absolute``: ``mean_b |dL/d xi|``, the paper's importance. ``batch_absolute``:
    ``|mean_b dL/d xi|``, what Michel et al.'s code accumulates (one gate tensor for the whole
    batch, its gradient's absolute value). ``signed``: ``-mean_b dL/d xi``,
    the first-order loss increase when a head is masked, so that a head whose output raises the
    loss ranks last instead of first. ``per_module``: each attention module's scores divided
    by their L2 norm (Michel et al.) before the global ranking."""
    if importance == "absolute":
        scores = signed.abs().mean(0)
    elif importance == "batch_absolute":
        scores = signed.mean(0).abs()
    else:
        scores = -signed.mean(0)
    if ranking == "global":
        return scores
    return normalise_by_layer(scores.detach().cpu().numpy(), list(module_sizes))


@dataclass
class MaskTally:
    """Which heads HeadMask masked since the last log record, and how often a masked head's
    mean ``dL/d xi`` was positive (Impt-N: a head whose output raised the batch's loss).

    Why: a head masked in most batches gets no gradient in those batches; whether the masked
    set rotates is what tells Impt-N's intended dynamic (importance made flatter) from heads
    left untrained and then switched on at test time."""

    names: list[str]
    counts: np.ndarray = field(init=False)
    batches: int = 0
    masked: int = 0
    harmful: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.names), dtype=np.int64)

    def add(self, heads: Sequence[int], signed_mean: Tensor | None = None) -> None:
        self.batches += 1
        self.counts[list(heads)] += 1
        if signed_mean is not None and len(heads):
            self.masked += len(heads)
            self.harmful += int((signed_mean[list(heads)] > 0).sum())

    def record(self, update: int) -> dict[str, Any] | None:
        """The ``headmask`` log record since the last one (None when no batch was masked),
        and a fresh count: ``masked.<type.layer.hN>`` is the share of batches the head was
        masked in."""
        if not self.batches:
            return None
        rec: dict[str, Any] = {"event": "headmask", "update": update, "batches": self.batches}
        for name, count in zip(self.names, self.counts.tolist(), strict=True):
            kind, layer, head = name.split(".")
            rec[f"{kind}.{layer}.masked.h{head}"] = round(count / self.batches, 4)
        if self.masked:
            rec["harmful_share"] = round(self.harmful / self.masked, 4)
        self.counts[:] = 0
        self.batches = self.masked = self.harmful = 0
        return rec


def random_heads(total: int, n: int, seed: int, update: int, micro: int) -> list[int]:
    """``n`` distinct heads drawn by a generator seeded from ``(seed, update, micro)``."""
    rng = np.random.default_rng([seed, update, micro])
    return sorted(rng.choice(total, size=n, replace=False).tolist())


def heads_to_mask(
    model: Transformer,
    batch: Batch,
    hm: HeadMaskConfig,
    draw: tuple[int, int, int],
    smoothing: float,
    module_sizes: Sequence[int],
) -> tuple[list[int], Tensor | None]:
    """The heads HeadMask masks for ``batch``: Random-N's draw for ``draw`` (seed, update,
    micro-step), or Impt-N's ``n`` heads ranked by ``impt_scores`` of the loss training uses
    (label ``smoothing``), the importance taken in the model's current mode; for Impt-N also
    the batch's mean signed ``dL/d xi`` per head (what ``MaskTally`` counts as harmful). The
    trainer and the diagnosis's "masked as in training" both choose here, so they agree."""
    n = hm.n if hm.n is not None else max(1, round(0.125 * model.num_heads))
    if hm.mode == "random":
        return random_heads(model.num_heads, n, *draw), None

    def loss(m: Transformer, b: Batch) -> Tensor:
        return per_sentence_loss(m, b, smoothing)

    signed = sentence_importance(model, batch, loss, absolute=False)
    scores = impt_scores(signed, hm.importance, hm.ranking, module_sizes)
    return select_important(scores, n), signed.mean(0).detach()


def mask_gates(total: int, masked: list[int], device: torch.device) -> Tensor:
    """``[1, G]`` gates with the masked heads at 0 (no rescaling of the others)."""
    gates = torch.ones(1, total, device=device)
    gates[0, masked] = 0.0
    return gates


def groups(importance: np.ndarray, count: int = 8) -> list[list[int]]:
    """Heads by descending importance split into ``count`` groups (``numpy.array_split``)."""
    order = np.argsort(-np.asarray(importance), kind="stable")
    return [sorted(g.tolist()) for g in np.array_split(order, count)]


def masking_schedule(importance: np.ndarray, count: int = 8) -> dict[str, list[list[int]]]:
    """Cumulative masks for the curves: most important groups first, least important first."""
    gs = groups(importance, count)
    desc = [sorted(h for g in gs[:m] for h in g) for m in range(count + 1)]
    asc = [sorted(h for g in gs[count - m :] for h in g) if m else [] for m in range(count + 1)]
    return {"descending": desc, "ascending": asc, "groups": gs}
