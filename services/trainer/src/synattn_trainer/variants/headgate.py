"""Head gates xi: HeadMask's masks, head importance and masking curves (Sun et al. 2022;
docs/papers/headmask.md)."""

from __future__ import annotations

from torch import Tensor

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.variant_options import VanillaConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext


class HeadGates(AttentionVariant):
    """Each head's output times its gate ``xi_g`` (1: on, 0: masked; a gradient to ``xi`` at 1
    is the head's importance). The gates are one model-wide tensor ``[B|1, G]`` over global
    head indices, read from this module's first head ``offset`` on; None leaves heads alone.

    Every attention module carries one after its configured variants, through the same
    ``head_outputs`` hook as any variant. It is not selectable by name and has no parameters,
    so checkpoints do not change."""

    def __init__(self, model: ModelConfig, kind: AttentionType, layer: int) -> None:
        super().__init__(VanillaConfig(), model, kind, layer)
        self.offset = 0
        self.gates: Tensor | None = None

    def head_outputs(self, heads: Tensor, ctx: AttnContext) -> Tensor:
        if self.gates is None:
            return heads
        xi = self.gates[:, self.offset : self.offset + self.heads]
        return heads * xi[:, :, None, None].to(heads.dtype)
