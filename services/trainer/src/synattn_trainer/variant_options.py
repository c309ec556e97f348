"""Options of every attention variant, and where each may be placed: no torch here.

The job API validates a whole training configuration at submit time with these models (its
image need not carry PyTorch), and the trainer builds variants from the very same classes, so a
configuration accepted at the door cannot fail later for a configuration reason.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from synattn_shared.defaults import LP_OUTSIDE, RP_CLIP, SLA_M, SLR_TAU
from synattn_shared.errors import validation_line
from synattn_shared.syntax.phrase import LpOutside
from synattn_trainer.config_base import AttentionType, ModelConfig, VariantSpec
from synattn_trainer.plugin_registry import PluginAware

Heads = list[int] | Literal["all"]


class VariantConfig(BaseModel):
    """Base of every variant's typed options (unknown keys and non-finite numbers are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        """Raise ``ValueError`` when these options cannot run on this attention type and shape
        (``model`` is the view the attention sees: the encoder's own head count included)."""

    def replaces(self) -> frozenset[str]:
        """What these options take over: ``attention`` (the whole attention computation) and/or
        ``aggregation`` (the output projection W^O). At most one variant of a layer may take
        each; biases, masks, observers and auxiliary losses compose freely."""
        return frozenset()


def source_only(kind: AttentionType, name: str) -> None:
    """Variants that read the source parse run in encoder self-attention only."""
    if kind != "enc_self":
        raise ValueError(f"{name} uses the source parse: encoder self-attention only, not {kind}")


def check_heads(heads: Heads, n_heads: int, what: str) -> None:
    """Every selected head exists."""
    if heads == "all":
        return
    for h in heads:
        if not 0 <= h < n_heads:
            raise ValueError(f"{what}: head {h} out of range 0..{n_heads - 1}")


class VanillaConfig(VariantConfig):
    """Vanilla attention has no options."""


class DeaConfig(VariantConfig):
    """Dependency mask: keys that are the query itself, its head or a dependent (DEA)."""

    heads: Heads = "all"

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "dea")
        check_heads(self.heads, model.heads, "heads")


class LpeaConfig(VariantConfig):
    """Local-phrase bias ``P = -|tanh(W_P M + b_P) U_P|`` over clipped RP (LPEA)."""

    k: int = Field(RP_CLIP, ge=0, le=62)
    lp_outside: LpOutside = LP_OUTSIDE
    heads: Heads = "all"

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "lpea")
        check_heads(self.heads, model.heads, "heads")


class RelPosConfig(VariantConfig):
    """Shaw et al. relative positions, clip ``k``, key and value terms."""

    k: int = Field(16, ge=0, le=512)
    values: bool = True


class LocalnessConfig(VariantConfig):
    """Yang et al. Gaussian bias with a predicted centre and window per query."""


class SlrConfig(VariantConfig):
    """Soft syntactic local range ``log m`` with temperature ``tau`` (Hou et al.)."""

    tau: float = Field(SLR_TAU, gt=0, le=1e6)
    mode: Literal["pure", "avg", "gated"] = "gated"
    ignore_p: float = Field(0.0, ge=0, lt=1, description="syntax-ignoring dropout on A_syn")
    prewarm_epochs: int = Field(0, ge=0, le=10_000, description="epochs with the gate frozen")
    prewarm_fraction: float = Field(
        0.0, ge=0, le=1, description="the gate frozen for this share of train.max_updates"
    )
    heads: Heads = Field(
        "all", description="heads that take syntax (pure: the log-mask; avg/gated: the mix)"
    )

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "slr")
        check_heads(self.heads, model.heads, "heads")

    def replaces(self) -> frozenset[str]:
        return frozenset() if self.mode == "pure" else frozenset({"attention"})


class RheConfig(VariantConfig):
    """Redundant heads found per sentence, enlivened with DEA or LPEA, or pruned (Zhang et al.
    2021).

    RHE on Rel_Pos or Localness is a composition: list ``rel_pos`` or ``localness`` on the same
    layer, before ``rhe`` (their biases and Rel_Pos's value term reach RHE's attention)."""

    sea: Literal["dea", "lpea"] = "dea"
    mode: Literal["enliven", "prune"] = "enliven"
    gate: Literal["dynamic", "fixed", "confidence"] = Field(
        "dynamic",
        description="a head is important for a sentence when its syntactic attention exceeds: "
        "sigmoid(h_conf) (dynamic, the paper's Eq. 10), f_gate (fixed), or h_conf itself "
        "(confidence, the paper's prose: 'higher than the average of maximum attention weights')",
    )
    f_gate: float = Field(0.5, gt=0, le=1)
    k: int = Field(RP_CLIP, ge=0, le=62, description="LPEA clip")
    lp_outside: LpOutside = LP_OUTSIDE

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "rhe")

    def replaces(self) -> frozenset[str]:
        return frozenset({"attention"})


class LisaConfig(VariantConfig):
    """One head supervised to attend to each token's dependency parent (LISA)."""

    head: int = Field(0, ge=0, le=1023)
    loss: Literal["l2", "ce"] = "l2"
    weight: float = Field(1.0, ge=0, le=1e4)

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "lisa")
        if self.head >= model.heads:
            raise ValueError(f"lisa head {self.head} out of range 0..{model.heads - 1}")


class PascalConfig(VariantConfig):
    """Logits scaled by a Gaussian centred on the parent (Bugliarello & Okazaki 2020)."""

    heads: list[int] = Field(default_factory=lambda: [0, 1], max_length=1024)
    sigma: float = Field(1.0, gt=0, le=1e6)
    parent_ignoring: float = Field(0.4, ge=0, le=1)

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "pascal")
        check_heads(self.heads, model.heads, "heads")

    def replaces(self) -> frozenset[str]:
        return frozenset({"attention"})


class SlaConfig(VariantConfig):
    """Dependency-distance local mask mixed with global attention by a naive gate (SLA)."""

    m: int = Field(SLA_M, ge=0, le=4096)
    neighbour_union: bool = True
    punct_visible: bool = True
    gate: Literal["token", "head"] = "token"

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        source_only(kind, "sla")

    def replaces(self) -> frozenset[str]:
        return frozenset({"attention"})


class FixedConfig(VariantConfig):
    """Heads ``0..fixed-1`` follow patterns 1..fixed; the rest are learned (Raganato et al.)."""

    fixed: int = Field(7, ge=1, le=8, description="7: 7F+1L, 8: 8F")
    word_based: bool = False
    dropout_on_fixed: bool = False
    ablate: list[int] = Field(
        default_factory=list, max_length=8, description="heads gated to 0 (test time)"
    )

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        if kind != "enc_self":
            raise ValueError(f"fixed patterns are for encoder self-attention, not {kind}")
        if self.fixed > model.heads:
            raise ValueError(f"{self.fixed} fixed heads but the model has {model.heads}")
        check_heads(self.ablate, model.heads, "ablate")

    def replaces(self) -> frozenset[str]:
        return frozenset({"attention"})


class DisagreementConfig(VariantConfig):
    """Penalise similar heads (Li et al. 2018): subspace, position or output term."""

    term: Literal["subspace", "position", "output"] = "output"
    weight: float = Field(1.0, ge=0, le=1e4, description="lambda")
    include_diagonal: bool = True


class RoutingConfig(VariantConfig):
    """Routing-by-agreement replacing the head aggregation (Li et al. 2019)."""

    method: Literal["simple", "em"] = "em"
    iterations: int = Field(3, ge=1, le=100)
    capsule_dim: int = Field(1, ge=1, le=65_536)
    softmax_over: Literal["outputs", "inputs"] = "outputs"
    em_use_activation: bool = True
    lambda_min: float = Field(1.0, ge=0, le=1e4)
    lambda_max: float = Field(3.0, ge=0, le=1e4)
    output_layernorm: bool = Field(
        False,
        description="the earlier placement (docs/papers/diversity.md, 'Decisions'): dropout in "
        "the vote network and a LayerNorm on the routed output instead of on the vote network's "
        "input",
    )

    def check_placement(self, model: ModelConfig, kind: AttentionType) -> None:
        if model.d_model % self.capsule_dim:
            raise ValueError(
                f"capsule_dim {self.capsule_dim} does not divide d_model {model.d_model}"
            )

    def replaces(self) -> frozenset[str]:
        return frozenset({"aggregation"})


# the built-ins; a look-up also sees the installed plugins' variants (synattn_trainer.plugins)
OPTIONS: dict[str, type[VariantConfig]] = PluginAware(
    {
        "vanilla": VanillaConfig,
        "dea": DeaConfig,
        "lpea": LpeaConfig,
        "rel_pos": RelPosConfig,
        "localness": LocalnessConfig,
        "slr": SlrConfig,
        "rhe": RheConfig,
        "lisa": LisaConfig,
        "pascal": PascalConfig,
        "sla": SlaConfig,
        "fixed": FixedConfig,
        "disagreement": DisagreementConfig,
        "routing": RoutingConfig,
    }
)


def variant_options(
    spec: VariantSpec, model: ModelConfig, kind: AttentionType, where: str | None = None
) -> VariantConfig:
    """The validated options of one variant spec on one attention type.

    Raises:
        ValueError: unknown name, invalid options or a placement the variant refuses (the
            message names the variant and the attention type).
    """
    if spec.name not in OPTIONS:
        raise UnknownVariant(spec.name)
    try:
        config = OPTIONS[spec.name].model_validate(spec.options)
        config.check_placement(model, kind)
    except ValueError as exc:
        raise ValueError(
            f"variant {spec.name!r} on {where or kind}: {_first_error(exc)}"
        ) from None
    return config


class UnknownVariant(ValueError):
    """A name no variant has. The configuration (``synattn_trainer.config``), which knows the
    presets too, turns it into ``presets.unknown_variant``'s message: a preset's name in a
    variant slot is told how to name it."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(unknown_variant_text(name))


def unknown_variant_text(name: str, preset: bool = False) -> str:
    """Why ``name`` is no variant: the known ones, and either that ``name`` is a preset
    (``preset``) or that a plugin's variant needs its plugin installed."""
    why = f"unknown attention variant {name!r}; known: {', '.join(OPTIONS)}"
    if preset:
        return why + f"; {name!r} is a preset: write `preset: {name}` at the top of the config"
    # a plugin's variant, where that plugin is not installed (docs/plugins.md)
    return why + "; a plugin's variant needs its plugin installed (synattn variants list)"


def check_composition(
    specs: list[VariantSpec], model: ModelConfig, kind: AttentionType, layer: int
) -> None:
    """The variants of one layer, in order, can run together: at most one takes over the
    attention and at most one the aggregation (the error names both)."""
    owner: dict[str, str] = {}
    for spec in specs:
        for part in sorted(variant_options(spec, model, kind).replaces()):
            if part in owner:
                raise ValueError(
                    f"attention.{kind} layer {layer}: {owner[part]!r} and {spec.name!r} both "
                    f"replace the {part}; at most one variant per layer may"
                )
            owner[part] = spec.name


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first: dict[str, Any] = errors()[0]
        return validation_line(first)
    return str(exc)
