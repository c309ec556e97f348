"""synattn plugin ``distance-decay``: what it declares (read without torch: the job API
validates configurations with the options model alone).

The variant ``distance_decay`` adds ``-s_h * |i - j|`` to the self-attention logits of head
``h``, a penalty growing with the distance between query ``i`` and key ``j``: the linear biases
of ALiBi (Press et al. 2022), here beside the position embeddings, with each head's slope
``s_h`` learned from ALiBi's geometric start. The preset ``distance-decay`` puts it on every
self-attention layer of the encoder and the decoder.
"""

from __future__ import annotations

from pydantic import Field

from synattn_trainer.config import AttentionType, ModelConfig
from synattn_trainer.plugins import PluginVariant
from synattn_trainer.variant_options import Heads, VariantConfig, check_heads


class DistanceDecayConfig(VariantConfig):
    """A linear distance penalty on the logits, ``-s_h * |i - j|``, per head (ALiBi's form)."""

    heads: Heads = Field("all", description="heads that take the penalty (others: vanilla)")
    learn: bool = Field(True, description="learn each head's slope (false: ALiBi's, fixed)")
    max_distance: int = Field(
        0, ge=0, le=100_000, description="distances beyond this count as this (0: no clip)"
    )

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        if kind == "enc_dec":
            raise ValueError(
                "distance_decay is for self-attention: a target position and a source "
                "position are not on one axis"
            )
        check_heads(self.heads, model.heads, "heads")


VARIANTS = {
    # the class by its import path: torch is imported when a model is built, not before
    "distance_decay": PluginVariant(
        DistanceDecayConfig, "synattn_distance_decay.attention:DistanceDecay"
    ),
}

PRESETS = {
    "distance-decay": {
        "attention": {
            "enc_self": [{"name": "distance_decay"}],
            "dec_self": [{"name": "distance_decay"}],
        }
    },
}
