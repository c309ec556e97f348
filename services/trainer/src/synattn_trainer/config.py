"""Training configuration: one typed, validated object, loaded from YAML (``synattn train CFG``).

Attention variants are chosen per attention type and layer by name; each variant validates its
own options (see ``synattn_trainer.variants``), so the trainer never branches on variant names.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, model_validator

from synattn_trainer.config_base import (
    ATTENTION_TYPES,
    AttentionType,
    ModelConfig,
    Strict,
    VariantSpec,
)

__all__ = [  # the base parts are imported from here too
    "ATTENTION_TYPES",
    "AttentionType",
    "ModelConfig",
    "Strict",
    "TrainConfig",
    "VariantSpec",
]

EXECUTION_ONLY: dict[str, Any] = {"execution_only": True}
"""``json_schema_extra`` of a setting that changes how a run executes, not what it computes
(see ``execution_only_defaults``)."""

OLD_BEHAVIOUR_AT_DEFAULT: dict[str, Any] = {"old_behaviour_at_default": True}
"""``json_schema_extra`` of a setting added after runs were published whose default is what
those runs computed (a new reading of a method beside the one they trained): left out of a
run's identity at its default, as an execution-only setting is."""


class DataConfig(Strict):
    """Where the parsed training data and the subword vocabulary live."""

    train: str  # shard directory with a ``tgt`` column (``synattn parse --tgt``)
    valid: str
    test: str | None = None
    tokenizer: str  # tokenizer.json (``synattn tokenizer train``)
    max_tokens: int = Field(4096, ge=16, le=10_000_000, description="source tokens per batch")
    max_len: int = Field(
        256, ge=4, le=100_000, description="drop training pairs longer than this (subwords)"
    )
    source_eos: bool = Field(
        True,
        description="append </s> to the source (fairseq, THUMT); the fixed-pattern paper "
        "(OpenNMT-py) had none, so its presets set false (docs/papers/index.md, 'Source </s>')",
    )


class OptimConfig(Strict):
    """Adam with linear warm-up and inverse-square-root decay (the ``m30k-small`` recipe)."""

    lr: float = Field(1e-3, gt=0, le=10, description="peak learning rate")
    warmup: int = Field(2000, ge=1, le=100_000_000)
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = Field(1e-9, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0, le=10)
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    clip_norm: float = Field(0.0, ge=0, le=1e6, description="0 = no clipping")
    accumulate: int = Field(1, ge=1, le=1024, description="batches per update")
    implementation: Literal["fused", "foreach", "for-loop"] = Field(
        "fused",
        description="Adam's kernel: fused (one kernel for every parameter; bench/peers/peer.py), "
        "foreach (batched per-op), or PyTorch's per-parameter loop; the same update up to "
        "floating-point rounding",
    )


class TrainLoopConfig(Strict):
    """How long to train and what to keep."""

    max_updates: int = Field(8000, ge=1, le=100_000_000)
    max_epochs: int = Field(100, ge=1, le=100_000)
    patience: int = Field(10, ge=0, description="epochs without dev-loss gain; 0 = off")
    seed: int = 1
    precision: Literal["fp32", "bf16", "auto"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    compile: bool = Field(
        False,
        description="torch.compile the training forward (off by default: on a 2-core CPU it "
        "did not pay, see bench/peers/peer.py --compile)",
    )
    cudnn_attention: bool = Field(
        False,
        description="let SDPA pick cuDNN's fused attention on CUDA (off: cuDNN plans its "
        "kernel per input shape, and batch shapes change every update; results/gpu/)",
        json_schema_extra=EXECUTION_ONLY,
    )
    fast_dropout: bool = Field(
        True,
        description="CPU dropout masks from 16-bit draws (synattn_trainer.dropout); false: "
        "torch's F.dropout",
    )
    checkpoint_every_updates: int = Field(
        0,
        ge=0,
        description="save a checkpoint every K updates (and at the end); 0 = once per epoch",
    )
    keep_checkpoints: int = Field(10, ge=1)
    checkpoint_select: Literal["average", "last", "best_valid"] = Field(
        "average",
        description="the final model: the average of the last average_last checkpoints inside "
        "the final average_window (fairseq's recipes), the last checkpoint (the diversity "
        "paper's single models), or the checkpoint of best validation loss (the gated-SLR "
        "paper's)",
    )
    extra_selections: list[Literal["average", "last", "best_valid"]] = Field(
        default_factory=list,
        max_length=3,
        description="final models made besides checkpoint_select's, from the same run (an "
        "experiment comparing several papers scores each comparison with its paper's protocol)",
    )
    average_last: int = Field(10, ge=1)
    average_window: float = Field(
        0.25,
        gt=0,
        le=1,
        description="averaged checkpoints come from this final share of the run's updates "
        "(docs/papers/index.md, 'Checkpoint averaging only at the end of training'); a config "
        "whose last average_last checkpoints start earlier is refused",
    )
    bleu_every: int = Field(5, ge=0, description="epochs between validation BLEU; 0 = never")
    bleu_max_sentences: int = Field(0, ge=0, description="0 = the whole validation set")
    log_every: int = Field(50, ge=1)

    def selections(self) -> list[str]:
        """The final models this run makes: checkpoint_select's first, then the extra ones."""
        return list(dict.fromkeys([self.checkpoint_select, *self.extra_selections]))

    @model_validator(mode="after")
    def _averaging_at_the_end(self) -> TrainLoopConfig:
        """Averaging every K updates must fit the final window (per-epoch saving is checked
        by the trainer, which knows the epoch length)."""
        from synattn_trainer.selection import averaging_error

        k = self.checkpoint_every_updates
        if "average" in self.selections() and k:
            why = averaging_error(self.max_updates, k, self.average_last, self.average_window)
            if why:
                raise ValueError(why)
        return self


class DecodeConfig(Strict):
    """Beam search (the ``m30k-small`` recipe: beam 5, score / length)."""

    beam: int = Field(5, ge=1, le=64)
    lenpen: float = Field(1.0, ge=0, le=10)
    lenpen_form: Literal["average", "gnmt"] = "average"
    max_len_a: float = Field(1.0, ge=0, le=10)
    max_len_b: int = Field(50, ge=0, le=10_000)
    batch_sentences: int = Field(64, ge=1, le=10_000)


class HeadMaskConfig(Strict):
    """HeadMask (Sun et al. 2022; docs/papers/headmask.md): mask N heads per batch during
    training only."""

    mode: Literal["none", "random", "impt"] = "none"
    n: int | None = Field(None, ge=1, description="heads masked per batch; default 12.5% of all")
    ranking: Literal["global", "per_module"] = Field(
        "global",
        description="Impt-N: rank raw importance over all heads (global), or each attention "
        "module's scores divided by their L2 norm first (per_module, Michel et al.)",
        json_schema_extra=OLD_BEHAVIOUR_AT_DEFAULT,
    )
    importance: Literal["absolute", "batch_absolute", "signed"] = Field(
        "absolute",
        description="Impt-N: a head's importance is |dL/dxi| per sentence, averaged (absolute, "
        "the paper's); the absolute value of the batch's mean dL/dxi (batch_absolute, Michel "
        "et al.'s code); or -dL/dxi averaged, the first-order loss increase when the head is "
        "masked (signed: a head whose output raises the loss is never 'important')",
        json_schema_extra=OLD_BEHAVIOUR_AT_DEFAULT,
    )


class TrainConfig(Strict):
    """Everything one training run is defined by.

    ``preset: NAME`` (``synattn presets``) stands for that preset's settings: it is expanded
    before validation, composing with the config's own settings by the rules of
    ``synattn_trainer.presets.with_preset``, and the configuration keeps no ``preset`` field (its
    resolved form, what a job stores and a run saves, spells the settings out)."""

    name: str = "run"
    data: DataConfig
    model: ModelConfig = Field(default_factory=ModelConfig)
    attention: dict[AttentionType, list[VariantSpec]] = Field(default_factory=dict)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    train: TrainLoopConfig = Field(default_factory=TrainLoopConfig)
    decode: DecodeConfig = Field(default_factory=DecodeConfig)
    headmask: HeadMaskConfig = Field(default_factory=HeadMaskConfig)

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data: Any) -> Any:
        """A mapping's ``preset`` key replaced by the preset's settings; a preset that cannot
        apply is an error at the key at fault (``preset``, ``data.source_eos``, ...)."""
        if not isinstance(data, dict) or "preset" not in data:
            return data
        from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

        from synattn_trainer.presets import PresetError, with_preset

        try:
            return with_preset(data)
        except PresetError as exc:
            error = PydanticCustomError("preset", "{reason}", {"reason": exc.reason})
            detail = InitErrorDetails(type=error, loc=exc.loc, input=data.get("preset"))
            raise ValidationError.from_exception_data(cls.__name__, [detail]) from None

    @model_validator(mode="after")
    def _variants_fit(self) -> TrainConfig:
        """Every variant names a layer that exists and options that can run there (the same
        check the trainer makes, done without torch so the job API can make it at submit)."""
        from synattn_trainer.presets import unknown_variant
        from synattn_trainer.variant_options import (
            UnknownVariant,
            check_composition,
            variant_options,
        )

        for kind, specs in self.attention.items():
            depth = self.model.enc_layers if kind == "enc_self" else self.model.dec_layers
            view = self.model.encoder_view() if kind == "enc_self" else self.model
            for spec in specs:
                layers = spec.layers if isinstance(spec.layers, list) else []
                bad = [x for x in layers if not 0 <= x < depth]
                if bad:
                    raise ValueError(
                        f"attention.{kind}: variant {spec.name!r} names layers {bad}; "
                        f"this model has layers 0..{depth - 1}"
                    )
                try:
                    variant_options(spec, view, kind)
                except UnknownVariant as exc:  # a preset's name is told how to name it
                    raise ValueError(unknown_variant(exc.name)) from None
            for layer in range(depth):
                check_composition(self.variants_for(kind, layer), view, kind, layer)
        m = self.model
        total = m.enc_layers * (m.enc_heads or m.heads) + 2 * m.dec_layers * m.heads
        if self.headmask.n is not None and self.headmask.n > total:
            raise ValueError(f"headmask.n {self.headmask.n}: the model has {total} heads")
        return self

    def variants_for(self, kind: AttentionType, layer: int) -> list[VariantSpec]:
        """The variants of layer ``layer`` of attention type ``kind``, in config order (none:
        vanilla). Their biases add, their auxiliary losses add; at most one replaces the
        attention and one the aggregation (checked when the config is made)."""
        depth = self.model.enc_layers if kind == "enc_self" else self.model.dec_layers
        return [s for s in self.attention.get(kind, []) if s.covers(layer, depth)]


@cache
def execution_only_defaults() -> dict[tuple[str, str], Any]:
    """Every ``section.key`` setting marked ``EXECUTION_ONLY`` or ``OLD_BEHAVIOUR_AT_DEFAULT``,
    with its default. A run's identity (``synattn study run``'s spec digest) leaves such a
    setting out at its default, so adding one to the config does not turn published runs,
    whose specs predate it, into another configuration; marking it here is all a new setting
    of this kind needs."""
    found: dict[tuple[str, str], Any] = {}
    for section, field in TrainConfig.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        for key, sub in model.model_fields.items():
            extra = sub.json_schema_extra
            if isinstance(extra, dict) and (
                extra.get("execution_only") or extra.get("old_behaviour_at_default")
            ):
                found[(section, key)] = sub.get_default(call_default_factory=True)
    return found


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML config with dotted-key overrides (mapping values merge into mappings);
    relative data paths are resolved against the config's folder.

    Raises:
        ValueError: unreadable YAML, a document that is not a mapping, an override into a
            value that is not a mapping, or an invalid configuration (pydantic's
            ``ValidationError`` is a ``ValueError``); the message names the key.
        OSError: the file cannot be read.
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ValueError(f"{p.name}: not valid YAML{where}") from None
    except UnicodeDecodeError:
        from synattn_shared.textfile import undecodable

        bad = undecodable(p)  # the line, and the byte that does not decode
        raise ValueError(f"{p.name}:{bad.line}: {bad.problem}; {bad.fix}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ValueError(f"{p.name}: a config is a mapping, not a {type(raw).__name__}")
    return resolve_config(raw, p.parent, overrides)


def resolve_config(
    raw: dict[str, Any], base: Path, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """The configuration of a raw mapping plus overrides; relative data paths against ``base``."""
    from synattn_trainer.plugin_registry import load_plugins

    load_plugins()  # a broken or clashing plugin install: its own line, before pydantic's
    raw = copy.deepcopy(raw)
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ValueError(f"override key {key!r}: expected a dotted key such as optim.lr")
        node = raw
        *parents, leaf = key.split(".")
        for depth, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: depth + 1])
                raise ValueError(f"override {key}: {where} is not a mapping")
            node = child
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            from synattn_trainer.presets import merge

            node[leaf] = merge(node[leaf], value)  # a preset fragment: nested keys merge
        else:
            node[leaf] = value
    data = raw.get("data")
    if isinstance(data, dict):
        for key in ("train", "valid", "test", "tokenizer"):
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str((base / data[key]).resolve())
    refuse_misspelled(raw)
    return TrainConfig.model_validate(raw)


def misspelled(raw: dict[str, Any]) -> list[tuple[tuple[str, ...], list[str]]]:
    """The keys of a raw config (top level and one section down) that no setting has but that
    are close to one (``train.max_update``: ``max_updates``), with their close matches."""
    import difflib

    def close(key: object, names: list[str]) -> list[str]:
        return difflib.get_close_matches(str(key), names, n=3, cutoff=0.75)

    top = [*TrainConfig.model_fields, "preset"]
    found: list[tuple[tuple[str, ...], list[str]]] = []
    for key, value in raw.items():
        field = TrainConfig.model_fields.get(key)
        if field is None:
            if key != "preset" and (near := close(key, top)):
                found.append(((str(key),), near))
            continue
        model = field.annotation
        if isinstance(value, dict) and isinstance(model, type) and issubclass(model, BaseModel):
            names = list(model.model_fields)
            for sub in value:
                if sub not in model.model_fields and (near := close(sub, names)):
                    found.append(((key, str(sub)), near))
    return found


def refuse_misspelled(raw: dict[str, Any]) -> None:
    """pydantic's refusal of an unknown key (``Extra inputs are not permitted``) with the
    setting it is close to, for every misspelled key (``misspelled``); nothing when there is
    none (an unknown key close to no setting is left to pydantic's own error)."""
    found = misspelled(raw)
    if not found:
        return
    from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

    details = []
    for loc, near in found:
        error = PydanticCustomError(
            "extra_forbidden",
            "Extra inputs are not permitted; close matches: {near}",
            {"near": ", ".join(".".join([*loc[:-1], n]) for n in near)},
        )
        node: Any = raw
        for part in loc:
            node = node.get(part) if isinstance(node, dict) else None
        details.append(InitErrorDetails(type=error, loc=loc, input=node))
    raise ValidationError.from_exception_data(TrainConfig.__name__, details)
