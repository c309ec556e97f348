"""Dropout whose mask costs a quarter of the random numbers on the CPU.

On the CPU, ``F.dropout`` draws one random number per element, and drawing them is nearly all
of its cost: about 10 ms for a 2,048 x 512 activation on two cores, against 0.07 ms for a
multiplication of the same size, so a small Transformer spends about a tenth of its update in
dropout (bench/peers/peer.py's profile). Here each 64-bit random word gives four 16-bit draws, the
keep test is one comparison, and the mask is applied by one multiplication: about a third of the
time. The drop probability is rounded to a multiple of 1/65,536 (0.1 becomes 0.100006) and the
kept values are scaled by the reciprocal of the rounded keep probability, so the output stays
unbiased. Draws come from the default generator, so seeding and the checkpointed RNG state make
runs repeatable as before. On other devices ``F.dropout`` is already fast and is used as is.

``use_fast(False)`` (``train.fast_dropout: false``) restores ``F.dropout`` everywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_FAST = True
_LEVELS = 1 << 16


def use_fast(enabled: bool) -> None:
    """Choose the CPU kernel for every dropout of this process (``F.dropout`` when False)."""
    global _FAST
    _FAST = enabled


def fast_on(device: torch.device) -> bool:
    """Whether dropout on ``device`` takes the cheaper mask (not in a compiled graph, which
    fuses ``F.dropout`` with its neighbours)."""
    return _FAST and device.type == "cpu" and not torch.compiler.is_compiling()


def keep_mask(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``1 / (1 - p')`` where kept and 0 where dropped, ``p'`` = ``p`` rounded to 1/65,536."""
    n = shape.numel()
    # every bit random: a plain ``random_()`` leaves an int64's sign bit 0, which would bias the
    # fourth 16-bit draw of each word (a test checks all four)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
    draws = words.view(torch.int16)[:n].view(shape)  # uniform over -32768 .. 32767
    dropped = round(p * _LEVELS)
    keep = draws >= dropped - _LEVELS // 2  # P(keep) = 1 - dropped / 65536
    return keep.to(dtype) * (_LEVELS / (_LEVELS - dropped))


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``F.dropout(x, p, training)``, with the cheaper CPU mask (module docstring)."""
    if not training or p == 0.0:
        return x
    if not fast_on(x.device) or p >= 1.0 or round(p * _LEVELS) == 0:
        return F.dropout(x, p, training)
    with torch.no_grad():
        mask = keep_mask(x.shape, p, x.dtype, x.device)
    return x * mask


class Dropout(nn.Dropout):
    """``nn.Dropout`` through ``dropout`` (same parameters, same state dict: none)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
