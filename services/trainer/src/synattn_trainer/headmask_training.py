"""HeadMask in training: which heads each batch masks (Random-N's draw, Impt-N's ranking by
importance), the tally of what was masked for the log, and the validation pass with heads
masked as in training. A part of ``Trainer`` (one of its base classes), apart from the loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from synattn_trainer.config import TrainConfig
from synattn_trainer.data import Batch
from synattn_trainer.headmask import MaskTally

if TYPE_CHECKING:
    from synattn_trainer.model import Transformer

VALID_MICRO = 1_000_000  # Random-N's validation draws: micro-steps training never uses


class HeadMaskTraining:
    """HeadMask's gates for ``Trainer``, which sets these attributes."""

    cfg: TrainConfig
    model: Transformer
    device: torch.device
    update: int
    _module_heads: list[int]
    _mask_tally: MaskTally | None

    if TYPE_CHECKING:  # Trainer's

        def _valid_losses(
            self, gates: Callable[[Batch, int], Tensor] | None = None
        ) -> tuple[float, float]: ...

    def _headmask_gates(self, batch: Batch, micro: int) -> Tensor | None:
        """HeadMask gates for one (micro-)batch: Random-N or Impt-N, the same for all sentences;
        which heads were masked is tallied for the log."""
        if self.cfg.headmask.mode == "none":
            return None
        from synattn_trainer import headmask

        masked, signed = self._choose_masked(batch, self.update, micro)
        if self._mask_tally is not None:
            self._mask_tally.add(masked, signed)
        return headmask.mask_gates(self.model.num_heads, masked, self.device)

    def _choose_masked(
        self, batch: Batch, update: int, micro: int
    ) -> tuple[list[int], Tensor | None]:
        """The heads HeadMask masks for ``batch`` at this (update, micro-step), and for Impt-N
        the batch's mean signed ``dL/d xi`` per head (``headmask.heads_to_mask``)."""
        from synattn_trainer import headmask

        return headmask.heads_to_mask(
            self.model, batch, self.cfg.headmask, (self.cfg.train.seed, update, micro),
            self.cfg.optim.label_smoothing, self._module_heads,
        )  # fmt: skip

    def validate_masked(self) -> dict[str, float]:
        """HeadMask runs: validation loss and NLL with heads masked as in training (Impt-N's
        importance on each validation batch, in eval mode; Random-N's draw from a generator of
        its own), beside the all-heads loss of ``validate``: a model whose masked loss is far
        below its all-heads loss depends on heads that were switched off while it trained."""
        from synattn_trainer import headmask

        def gates(b: Batch, i: int) -> Tensor:
            with torch.enable_grad():
                masked, _ = self._choose_masked(b, self.update, VALID_MICRO + i)
            return headmask.mask_gates(self.model.num_heads, masked, self.device)

        loss, nll = self._valid_losses(gates)
        return {"valid_loss_masked": loss, "valid_nll_masked": nll}
