"""Attention variants by name (importing this package registers the built-in ones)."""

from synattn_trainer.variants import syntax  # noqa: F401 - registers dea, lpea, rhe, slr, ...
from synattn_trainer.variants.base import (
    REGISTRY,
    AttentionVariant,
    AttnContext,
    VariantConfig,
    build_variant,
    register,
)

__all__ = [
    "REGISTRY",
    "AttentionVariant",
    "AttnContext",
    "VariantConfig",
    "build_variant",
    "register",
]
