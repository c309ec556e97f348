"""Attention variants by name (importing this package registers the built-in ones)."""

from synattn_trainer.variant_options import VariantConfig
from synattn_trainer.variants import (  # noqa: F401 - one file per variant; importing registers
    dea,
    disagreement,
    fixed,
    lisa,
    localness,
    lpea,
    pascal,
    rel_pos,
    rhe,
    routing,
    sla,
    slr,
)
from synattn_trainer.variants.base import (
    REGISTRY,
    AttentionVariant,
    AttnContext,
    Composite,
    Progress,
    build_layer_variant,
    build_variant,
    register,
)

__all__ = [
    "REGISTRY",
    "AttentionVariant",
    "AttnContext",
    "Composite",
    "Progress",
    "VariantConfig",
    "build_layer_variant",
    "build_variant",
    "register",
]
