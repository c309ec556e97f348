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


def outside_graph(method: Fn) -> Fn:
    """A method that runs eagerly inside a compiled forward (a graph break) instead of being
    traced: host-side work, or a Python number that changes every update and would otherwise be
    guarded on, recompiling the graph each time (``train.compile``).

    The method stays a plain function until ``keep_outside_graphs`` (``compile_forward``, before
    it compiles) wraps it in ``torch.compiler.disable``. That wrapper imports dynamo, 1-2 s of
    the start-up of every process that loads a model, which only a compiled forward needs."""
    return cast(Fn, _OutsideGraph(method))


class _OutsideGraph:
    """Registers the method when its class is created and puts the plain function back."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __set_name__(self, owner: type, name: str) -> None:
        _OUTSIDE_GRAPH.append((owner, name, self.fn))
        setattr(owner, name, self.fn)


_OUTSIDE_GRAPH: list[tuple[type, str, Callable[..., Any]]] = []


def keep_outside_graphs() -> None:
    """Wrap every ``outside_graph`` method in ``torch.compiler.disable``; idempotent."""
    for owner, name, fn in _OUTSIDE_GRAPH:
        if getattr(owner, name) is fn:
            setattr(owner, name, torch.compiler.disable(fn))  # type: ignore[no-untyped-call]


def logits_of(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """Scaled dot-product logits plus an additive mask, in float32."""
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
