"""DEA: the dependency mask as a -inf bias (Zhang et al. 2021; docs/papers/rhe-sea.md, "DEA")."""

from __future__ import annotations

from torch import Tensor

from synattn_shared.requests import DeaBias, FeatureRequest
from synattn_trainer.variant_options import DeaConfig
from synattn_trainer.variants.base import AttentionVariant, AttnContext, register
from synattn_trainer.variants.common import on_heads


@register("dea", DeaConfig)
class Dea(AttentionVariant):
    """``softmax(x + D)``, ``D = 0`` within one dependency arc, ``-inf`` elsewhere."""

    config: DeaConfig

    def requests(self) -> tuple[FeatureRequest, ...]:
        return (DeaBias(),)

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        return on_heads(ctx.syntax[DeaBias()][:, None], self.config.heads, self.heads)
