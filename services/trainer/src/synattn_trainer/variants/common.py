"""Small pieces the variants share: explicit attention and head selection."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

from synattn_trainer.dropout import dropout
from synattn_trainer.variant_options import Heads

Fn = TypeVar("Fn", bound=Callable[..., Any])


def outside_graph(fn: Fn) -> Fn:
    """``fn`` runs eagerly inside a compiled forward (a graph break) instead of being traced:
    host-side work, or a Python number that changes every update and would otherwise be
    guarded on, recompiling the graph each time (``train.compile``)."""
    return cast(Fn, torch.compiler.disable(fn))  # type: ignore[no-untyped-call]


def logits_of(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """Scaled dot-product logits plus an additive mask, in float32 (METHODS-syntax §2.5)."""
    x = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    return x if mask is None else x + mask


def softmax(x: Tensor) -> Tensor:
    return torch.softmax(x, dim=-1)


def apply(probs: Tensor, v: Tensor, p: float, training: bool) -> Tensor:
    """Attention dropout, then the weighted sum of values."""
    return dropout(probs, p, training).to(v.dtype) @ v


def head_mask(heads: Heads, n_heads: int, device: torch.device) -> Tensor | None:
    """``[1, H, 1, 1]`` True for the selected heads; None when all heads are selected."""
    if heads == "all":
        return None
    for h in heads:
        if not 0 <= h < n_heads:
            raise ValueError(f"head {h} out of range 0..{n_heads - 1}")
    m = torch.zeros(1, n_heads, 1, 1, dtype=torch.bool, device=device)
    m[0, list(heads)] = True
    return m


def on_heads(bias: Tensor, heads: Heads, n_heads: int) -> Tensor:
    """A bias ``[B, 1|H, T, T]`` kept on the selected heads, 0 on the others."""
    sel = head_mask(heads, n_heads, bias.device)
    if sel is None:
        return bias
    return torch.where(sel, bias, torch.zeros((), dtype=bias.dtype, device=bias.device))
