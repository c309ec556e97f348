"""The one extension point of multi-head attention, and the registry variants join by name.

A variant is an ``nn.Module`` attached to one attention module (one type, one layer). The
attention calls its hooks in this order; each default is vanilla behaviour:

1. ``logit_bias``  (a) an additive bias or ``-inf`` mask on the logits, per head or shared;
2. ``needs_probs`` (e) whether this call must materialise the probabilities (else fused SDPA);
3. ``observe``     (e) sees the probabilities when they exist (analysis, auxiliary losses);
   ``attend``      (b) may replace the whole attention computation (two attentions mixed, a
                   value term, a gate from the layer input); None keeps the default path.
                   A variant that replaces it calls ``ctx.report(probs)`` with the
                   probabilities it applied: analysis reads those, never a recomputation;
4. ``head_outputs``(b) replaces or gates the per-head outputs;
5. ``aggregate``   (c) replaces the output projection (head aggregation);
6. ``aux_loss``    (d) an auxiliary loss added to the training loss (collected after forward).

The trainer never branches on variant names: ``build_variant`` looks the name up here and
validates the options with the variant's typed config. Plugins' variants join the same registry
(``synattn_trainer.plugins``) when a model first uses them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch import Tensor, nn

from synattn_shared.requests import FeatureRequest
from synattn_trainer.config_base import AttentionType, ModelConfig, VariantSpec
from synattn_trainer.variant_options import OPTIONS, VanillaConfig, VariantConfig, variant_options


class Progress:
    """Where training stands, for variants that read it: ``update``, ``epoch`` and the planned
    ``max_updates`` (pre-warm-up schedules), and ``target_tokens`` of the last forward (a
    tensor on the model's device: auxiliary losses in per-token form).

    A plain object rather than a dict: a compiled forward guards only the attributes its
    code reads, so the update counter changing every step recompiles nothing that ignores it.
    """

    def __init__(self, update: int = 0, epoch: int = 0, max_updates: int = 0) -> None:
        self.update = update
        self.epoch = epoch
        self.max_updates = max_updates
        self.target_tokens: Tensor | int = 1


@dataclass
class AttnContext:
    """What a variant may read about the current call.

    Attributes:
        kind: ``enc_self``, ``dec_self`` or ``enc_dec``.
        layer: 0-based layer index within its stack.
        key_padding: ``[B, Tk]`` True at padded keys.
        query_padding: ``[B, Tq]`` True at padded queries.
        syntax: per-batch syntax tensors (source side, subword level), keyed by the request
            that asked for each (``synattn_shared.requests``).
        src_eos: ``[B, Ts]`` True at the source's ``</s>`` (None when the source has none).
        memo: tensors computed once per forward and shared by the layers (fixed patterns).
        masks: the padding and causal masks of this forward, built once and shared by layers.
        beam: cross-attention while decoding: each memory row (a sentence) serves ``beam``
            consecutive query rows (its hypotheses); 1 otherwise.
        state: training progress (``Progress``) for schedules such as pre-warm-up.
    """

    kind: AttentionType
    layer: int
    key_padding: Tensor | None
    query_padding: Tensor | None
    syntax: Mapping[FeatureRequest, Tensor] = field(default_factory=dict)
    state: Progress = field(default_factory=Progress)
    layer_input: Tensor | None = None  # [B, Tq, D], set by the attention before the hooks
    dropout: float = 0.0  # attention dropout rate of this call (0 in eval)
    value_term: Callable[[Tensor], Tensor | None] | None = None  # peers' extra value terms
    keep_probs: bool = False  # analysis asks: a replacing ``attend`` reports what it applied
    probs: Tensor | None = None  # [B, H, Tq, Tk] the probabilities ``attend`` applied
    src_eos: Tensor | None = None
    memo: dict[Hashable, Tensor] = field(default_factory=dict)
    masks: dict[Hashable, Tensor | None] = field(default_factory=dict)  # padding/causal, by kind
    beam: int = 1  # decoding: queries are ``beam`` hypotheses per row of the memory

    def report(self, probs: Tensor) -> None:
        """Called by ``attend``: these are the attention probabilities it applied (before
        dropout). Kept only when analysis asked, so training pays nothing."""
        if self.keep_probs:
            self.probs = probs.detach()


class AttentionVariant(nn.Module):
    """Vanilla attention; subclasses override the hooks they need."""

    replaces_out_proj: ClassVar[bool] = False  # aggregate() never falls back to W^O

    def bind(self, peers: list[AttentionVariant]) -> None:
        """Called once the model is built, with every variant of the model (layer counting)."""

    def members(self) -> list[AttentionVariant]:
        """The variants this module is made of (itself; a ``Composite``: its parts)."""
        return [self]

    def requests(self) -> tuple[FeatureRequest, ...]:
        """The syntax features every batch must carry for this variant (read back from
        ``ctx.syntax`` with the same request as the key)."""
        return ()

    def __init__(
        self, config: VariantConfig, model: ModelConfig, kind: AttentionType, layer: int
    ) -> None:
        super().__init__()
        self.config = config
        self.heads = model.heads
        self.d_head = model.d_model // model.heads
        self.kind = kind
        self.layer = layer

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        """Additive logit bias ``[B|1, H|1, Tq, Tk]`` (``-inf`` blocks), or None."""
        return None

    def needs_probs(self, ctx: AttnContext) -> bool:
        """True when this call must compute explicit probabilities (no fused kernel)."""
        return False

    def observe(self, probs: Tensor, ctx: AttnContext) -> None:
        """See the attention probabilities ``[B, H, Tq, Tk]`` (only when they were computed)."""

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        """Replace the attention: per-head outputs ``[B, H, Tq, d_head]``, or None (default).

        ``mask`` already holds padding, causality and ``logit_bias``.
        """
        return None

    def values(self, probs: Tensor) -> Tensor | None:
        """An extra value term ``[B, H, Tq, d_head]`` from the (dropped-out) probabilities,
        added to ``probs @ V`` by whoever computes the attention (Shaw et al.'s ``a^V``), or
        None. A variant that returns one must also ask for explicit probabilities."""
        return None

    def head_outputs(self, heads: Tensor, ctx: AttnContext) -> Tensor:
        """Per-head outputs ``[B, H, Tq, d_head]``; return them gated or replaced."""
        return heads

    def aggregate(self, heads: Tensor, out_proj: nn.Linear, ctx: AttnContext) -> Tensor | None:
        """Replace the head aggregation: return ``[B, Tq, d_model]``, or None for concat + proj."""
        return None

    def aux_loss(self) -> Tensor | None:
        """An auxiliary loss from the last forward pass, summed over target tokens (the trainer
        divides by the token count like the main loss), or None."""
        return None

    def stats(self) -> dict[str, float]:
        """Numbers to log (gate values, head labels), named per head."""
        return {}


REGISTRY: dict[str, tuple[type[AttentionVariant], type[VariantConfig]]] = {}


def register(
    name: str, config: type[VariantConfig]
) -> Callable[[type[AttentionVariant]], type[AttentionVariant]]:
    """Class decorator: make a variant selectable by ``name`` with options of type ``config``."""

    def deco(cls: type[AttentionVariant]) -> type[AttentionVariant]:
        if name in REGISTRY:
            raise ValueError(f"variant {name!r} is registered twice")
        if OPTIONS.setdefault(name, config) is not config:  # built-ins: the torch-free models
            raise ValueError(f"variant {name!r}: its options must be OPTIONS[{name!r}]")
        REGISTRY[name] = (cls, config)
        return cls

    return deco


register("vanilla", VanillaConfig)(AttentionVariant)


def build_variant(
    spec: VariantSpec, model: ModelConfig, kind: AttentionType, layer: int
) -> AttentionVariant:
    """The variant module for one attention module.

    Raises:
        ValueError: unknown name or invalid options (the message names both).
    """
    config = variant_options(spec, model, kind, f"{kind} layer {layer}")
    # a plugin's variant is not in REGISTRY until its class is first imported and registered
    cls = REGISTRY[spec.name][0] if spec.name in REGISTRY else plugin_class(spec.name)
    return cls(config, model, kind, layer)


def plugin_class(variant: str) -> type[AttentionVariant]:
    """A plugin variant's class, imported and registered (``register``) on first use.

    Raises:
        PluginError: no plugin declares ``variant``, or its class cannot be imported or is no
            ``AttentionVariant``.
    """
    import importlib

    from synattn_trainer.plugin_registry import WHERE, PluginError, _lock, owner

    p = owner(variant)
    if p is None:
        raise PluginError(f"no plugin declares variant {variant!r} ({WHERE})")
    with _lock:
        if variant in REGISTRY:
            return REGISTRY[variant][0]
        decl = p.variants[variant]
        cls: Any = decl.implementation
        if isinstance(cls, str):
            module, _, attr = cls.partition(":")
            try:
                cls = getattr(importlib.import_module(module), attr)
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                raise PluginError(f"plugin {p.name!r}: variant {variant!r}: cannot import "
                                  f"{decl.implementation}: {why}") from None  # fmt: skip
        if not (isinstance(cls, type) and issubclass(cls, AttentionVariant)):
            raise PluginError(
                f"plugin {p.name!r}: variant {variant!r}: {cls!r} is not an "
                "AttentionVariant subclass"
            )
        register(variant, decl.options)(cls)
        return cls


class Composite(AttentionVariant):
    """Several variants on one attention module, in config order: logit biases add, observers
    all see the probabilities, at most one replaces the attention and one the aggregation
    (the config check guarantees it), head-output hooks chain, auxiliary losses add."""

    def __init__(self, members: list[AttentionVariant]) -> None:
        first = members[0]
        nn.Module.__init__(self)
        self.heads, self.d_head = first.heads, first.d_head
        self.kind, self.layer = first.kind, first.layer
        self.parts = nn.ModuleList(members)
        self.replaces_out_proj = any(m.replaces_out_proj for m in members)  # type: ignore[misc]

    def members(self) -> list[AttentionVariant]:
        return list(self.parts)  # type: ignore[arg-type]

    def requests(self) -> tuple[FeatureRequest, ...]:
        return tuple(dict.fromkeys(r for m in self.members() for r in m.requests()))

    def logit_bias(self, q: Tensor, k: Tensor, ctx: AttnContext) -> Tensor | None:
        total: Tensor | None = None
        for m in self.members():
            bias = m.logit_bias(q, k, ctx)
            if bias is not None:
                total = bias if total is None else total + bias
        return total

    def needs_probs(self, ctx: AttnContext) -> bool:
        return any(m.needs_probs(ctx) for m in self.members())

    def observe(self, probs: Tensor, ctx: AttnContext) -> None:
        for m in self.members():
            m.observe(probs, ctx)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, ctx: AttnContext
    ) -> Tensor | None:
        out = None
        for m in self.members():  # every member runs (observers keep state); one may replace
            replaced = m.attend(q, k, v, mask, ctx)
            if replaced is not None:
                out = replaced
        return out

    def values(self, probs: Tensor) -> Tensor | None:
        terms = [t for m in self.members() if (t := m.values(probs)) is not None]
        return None if not terms else sum(terms[1:], terms[0])

    def head_outputs(self, heads: Tensor, ctx: AttnContext) -> Tensor:
        for m in self.members():
            heads = m.head_outputs(heads, ctx)
        return heads

    def aggregate(self, heads: Tensor, out_proj: nn.Linear, ctx: AttnContext) -> Tensor | None:
        for m in self.members():
            out = m.aggregate(heads, out_proj, ctx)
            if out is not None:
                return out
        return None

    def aux_loss(self) -> Tensor | None:
        losses = [x for m in self.members() if (x := m.aux_loss()) is not None]
        return None if not losses else sum(losses[1:], losses[0])

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for m in self.members():
            out.update(m.stats())
        return out


def build_layer_variant(
    specs: list[VariantSpec], model: ModelConfig, kind: AttentionType, layer: int
) -> AttentionVariant:
    """The variant module of one attention module: vanilla, one variant, or a ``Composite``."""
    if not specs:
        return build_variant(VariantSpec(), model, kind, layer)
    built = [build_variant(s, model, kind, layer) for s in specs]
    return built[0] if len(built) == 1 else Composite(built)
