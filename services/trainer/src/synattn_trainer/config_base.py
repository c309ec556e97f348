"""The parts of the training configuration that the variant registry, the presets and the
variants themselves are built on: the attention types, the model's shape and a variant's
placement. The full configuration (``synattn_trainer.config``) validates through those
registries, so these live below them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AttentionType = Literal["enc_self", "dec_self", "enc_dec"]
ATTENTION_TYPES: tuple[AttentionType, ...] = ("enc_self", "dec_self", "enc_dec")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModelConfig(Strict):
    """Transformer encoder-decoder shape (defaults: ``examples/configs/m30k-small.yaml``)."""

    enc_layers: int = Field(3, ge=1)
    dec_layers: int = Field(3, ge=1)
    d_model: int = Field(256, ge=8)
    d_ff: int = Field(1024, ge=8)
    heads: int = Field(8, ge=1)
    enc_heads: int | None = Field(
        None,
        ge=1,
        description="encoder self-attention heads (default: heads; 1 = the 1L baseline)",
    )
    norm: Literal["pre", "post"] = "post"
    final_norm: bool = False  # a LayerNorm after each stack (usual with pre-norm)
    tie_embeddings: bool = True  # source, target and output share one matrix (joint vocabulary)
    output_bias: bool = False
    dropout: float = Field(0.3, ge=0, lt=1)
    attn_dropout: float = Field(0.1, ge=0, lt=1)
    relu_dropout: float = Field(0.0, ge=0, lt=1)
    max_positions: int = Field(1024, ge=8, le=1_000_000)

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        for n in (self.heads, self.enc_heads or self.heads):
            if self.d_model % n:
                raise ValueError(f"d_model {self.d_model} is not divisible by heads {n}")
        return self

    def encoder_view(self) -> ModelConfig:
        """The shape the encoder's self-attention sees (its own head count)."""
        if self.enc_heads is None or self.enc_heads == self.heads:
            return self
        return self.model_copy(update={"heads": self.enc_heads, "enc_heads": None})


class VariantSpec(Strict):
    """One variant applied to some layers of one attention type.

    ``layers``: indices, ``all``, or ``lower_half`` (layers ``0 .. ceil(L/2) - 1`` of its
    stack: Yang et al.'s localness on the lower layers, scaled to any depth)."""

    name: str = "vanilla"
    layers: list[int] | Literal["all", "lower_half"] = "all"
    options: dict[str, Any] = Field(default_factory=dict)

    def covers(self, layer: int, depth: int) -> bool:
        """Whether this spec applies to ``layer`` of a stack of ``depth`` layers."""
        if self.layers == "all":
            return True
        if self.layers == "lower_half":
            return layer < (depth + 1) // 2
        return layer in self.layers
