"""Named attention-variant presets: config fragments (``attention``, ``headmask``, ``model``,
``data``) that turn a vanilla training config into each paper's setting. Benchmarks and
experiment grids name variants by these keys; a grid may also give its own fragment; a training
config names one with ``preset: NAME`` (``with_preset``: how it composes with the config's own
settings); ``synattn presets`` lists them with their papers (``PAPERS``).

Each preset cites the table of its paper it follows; docs/papers/ has a page per paper. The
fixed-pattern paper trained with OpenNMT-py (stated), whose source has no ``</s>``: its presets
set ``data.source_eos: false`` and its baseline is ``8L``. The RHE paper's source ended in
``<EOS>`` (its Fig. 5; RHE's confidence measure counts the mass on it), so its presets keep the
default ``</s>`` and compare with ``vanilla`` (docs/papers/index.md, "Source </s>").
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from typing import Any, cast

from synattn_trainer.plugin_registry import PluginAware

ENC_L0 = {"layers": [0]}
ALL_TYPES = ("enc_self", "dec_self", "enc_dec")
NO_SOURCE_EOS = {"data": {"source_eos": False}}


def _enc(*specs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"attention": {"enc_self": list(specs)}, **extra}


# Zhang et al. 2021 (RHE + SEA): SEA/RHE on the first encoder layer only ("we only enhance the
# first layer", its §5.4 and its layer table); Rel_Pos on every layer (Shaw et al.); Localness
# on the lower layers (Yang et al.: layers 1-3 of 6; rule here: the lower half, ceil(L/2)
# layers). Source </s> kept: the paper's Fig. 5 source ends in <EOS>.
REL_POS = {"name": "rel_pos"}
LOCALNESS = {"name": "localness", "layers": "lower_half"}
RHE_SEA: dict[str, dict[str, Any]] = {
    "dea": _enc({"name": "dea", **ENC_L0}),  # Table 1, SEA rows
    "lpea": _enc({"name": "lpea", **ENC_L0}),
    "rhe+dea": _enc({"name": "rhe", **ENC_L0}),  # Table 1, DEA+RHE
    "rhe+lpea": _enc({"name": "rhe", "options": {"sea": "lpea"}, **ENC_L0}),
    "rhe-prune": _enc(  # Table 2, "+ prune": redundant heads dropped instead of enlivened
        {"name": "rhe", "options": {"mode": "prune"}, **ENC_L0}
    ),
    "rel_pos": _enc(REL_POS),  # Table 2, Rel_Pos
    "localness": _enc(LOCALNESS),  # Table 2, Localness
    "rel_pos+rhe": _enc(REL_POS, {"name": "rhe", **ENC_L0}),  # Table 2
    "localness+rhe": _enc(LOCALNESS, {"name": "rhe", **ENC_L0}),  # Table 2
}

# Raganato et al. 2020 (fixed patterns), Tables 1-2: 7 fixed + 1 learned head in every encoder
# layer, token- or word-based; 8F all fixed; 1L one learned head (d_h = d); 8L is vanilla.
FIXED_PATTERNS: dict[str, dict[str, Any]] = {
    "fixed-token": _enc({"name": "fixed"}, **NO_SOURCE_EOS),
    "fixed-word": _enc({"name": "fixed", "options": {"word_based": True}}, **NO_SOURCE_EOS),
    "8F": _enc({"name": "fixed", "options": {"fixed": 8}}, **NO_SOURCE_EOS),
    "1L": {"model": {"enc_heads": 1}, **NO_SOURCE_EOS},
    "8L": {**NO_SOURCE_EOS},  # the paper's learned baseline (vanilla without source </s>)
}

# Sun et al. 2022 (HeadMask), Tables 2-4 (its Table 1 lists the data sets): N = 12.5% of the heads
# masked per batch (18 of 144 there).
HEADMASK: dict[str, dict[str, Any]] = {
    "headmask-random": {"headmask": {"mode": "random"}},
    "headmask-impt": {"headmask": {"mode": "impt"}},
}

# Hou et al. (gated SLR). Table 2 tunes the pre-warm-up K (50-80 epochs of a run whose length the
# paper does not state) and the ignore rate p (0-0.4; IWSLT De-En: K = 80, p = 0.4). K is
# expressed as a share of the planned updates so it scales to short budgets: 0.4 of the run,
# and p = 0.2 (NC11's, the middle of the paper's range). Table 7 "All" = BatchNorm + pre-warm-up
# + syntax ignoring; "BatchNorm" alone is slr-gated-bn. Table 6 "Avg" and "Pure"; Pure follows
# Hou et al. 2022 and Table 5: the first two heads of the first layer.
GATED_SLR: dict[str, dict[str, Any]] = {
    "slr-gated": _enc(
        {"name": "slr", "options": {"mode": "gated", "prewarm_fraction": 0.4, "ignore_p": 0.2}}
    ),
    "slr-gated-bn": _enc({"name": "slr", "options": {"mode": "gated"}}),
    "slr-avg": _enc({"name": "slr", "options": {"mode": "avg"}}),
    "slr-pure": _enc({"name": "slr", "options": {"mode": "pure", "heads": [0, 1]}, **ENC_L0}),
    "lisa": _enc({"name": "lisa", **ENC_L0}),  # Table 3 baselines (docs/papers/index.md)
    "pascal": _enc({"name": "pascal", **ENC_L0}),
    "sla": _enc({"name": "sla"}),
}

# Li et al. 2021 (diversity): disagreement terms compared in Table 1 (encoder only there); Table 2
# finds all three attention types best, the default here (disagreement-enc is the public code's
# encoder-only setting). EM routing on "the low-level two layers of the
# encoder" (Table 4, Row 5). Table 5: both together, with the Output term (Table 1's best).
ROUTING_EM = {"name": "routing", "layers": [0, 1]}
DIVERSITY: dict[str, dict[str, Any]] = {
    **{
        f"disagreement-{term}": {
            "attention": {
                t: [{"name": "disagreement", "options": {"term": term}}] for t in ALL_TYPES
            }
        }
        for term in ("subspace", "position", "output")
    },
    "disagreement-enc": _enc({"name": "disagreement", "options": {"term": "output"}}),
    "routing-simple": _enc({**ROUTING_EM, "options": {"method": "simple"}}),
    "routing-em": _enc(ROUTING_EM),
    "disagreement+routing": {
        "attention": {
            "enc_self": [{"name": "disagreement", "options": {"term": "output"}}, ROUTING_EM],
            "dec_self": [{"name": "disagreement", "options": {"term": "output"}}],
            "enc_dec": [{"name": "disagreement", "options": {"term": "output"}}],
        }
    },
}

# the built-ins; a look-up also sees the installed plugins' presets (synattn_trainer.plugins)
VARIANTS: dict[str, dict[str, Any]] = PluginAware(
    {
        "vanilla": {},
        **RHE_SEA,
        **FIXED_PATTERNS,
        **HEADMASK,
        **GATED_SLR,
        **DIVERSITY,
    }
)


def merge(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``fragment`` merged in: nested mappings merge, anything else replaces."""
    out = dict(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Paper:
    """The paper a preset follows, as ``synattn presets`` names it."""

    cite: str  # first author(s) and year
    method: str  # the method in a few words
    title: str

    def label(self) -> str:
        return f"{self.cite}, {self.method}"


TRANSFORMER = Paper("Vaswani et al. 2017", "Transformer", "Attention Is All You Need")
PAPERS: tuple[tuple[Paper, dict[str, dict[str, Any]]], ...] = (
    (TRANSFORMER, {"vanilla": dict.__getitem__(VARIANTS, "vanilla")}),  # no plugin look-up
    (
        Paper("Zhang et al. 2021", "RHE + SEA",
              "Enlivening Redundant Heads in Multi-head Self-attention for Machine Translation"),
        RHE_SEA,
    ),
    (
        Paper("Raganato et al. 2020", "fixed patterns",
              "Fixed Encoder Self-Attention Patterns in Transformer-Based Machine Translation"),
        FIXED_PATTERNS,
    ),
    (
        Paper("Sun et al. 2022", "HeadMask",
              "Alleviating the Inequality of Attention Heads for Neural Machine Translation"),
        HEADMASK,
    ),
    (
        Paper("Hou et al.", "gated SLR",
              "Learning to Adaptively Incorporate External Syntax through Gated Self-Attention"),
        GATED_SLR,
    ),
    (
        Paper("Li et al. 2021", "diversity", "On the Diversity of Multi-Head Attention"),
        DIVERSITY,
    ),
)  # fmt: skip
"""Each preset group with the paper whose tables it follows (in ``VARIANTS``' order)."""

PLUGIN_PAPERS: list[tuple[Paper, dict[str, dict[str, Any]]]] = []
"""The installed plugins' preset groups, each with the paper its plugin names (or the plugin)."""

NOTES: dict[str, str] = {
    "rel_pos": "the paper's baseline: Shaw et al. 2018",
    "localness": "the paper's baseline: Yang et al. 2018",
    "lisa": "the paper's baseline: Strubell et al. 2018",
    "pascal": "the paper's baseline: Bugliarello & Okazaki 2020",
    "sla": "the paper's baseline: Li et al. 2021",
    "8L": "the paper's baseline: vanilla without a source </s>",
}
"""What a one-line summary adds for the presets that are a paper's baselines."""


def paper_of(name: str) -> Paper:
    """The paper preset ``name`` follows (``KeyError`` for an unknown name)."""
    if name not in VARIANTS:  # a look-up: the plugins' groups are in PLUGIN_PAPERS after it
        raise KeyError(name)
    for paper, group in (*PAPERS, *PLUGIN_PAPERS):
        if name in group:
            return paper
    raise KeyError(name)


def summary(name: str) -> str:
    """One line saying what preset ``name`` sets, e.g. ``enc_self: dea on layer 0``."""
    fragment = VARIANTS[name]
    kinds: dict[str, list[str]] = {}  # identical variant lists share a line
    for kind, specs in fragment.get("attention", {}).items():
        kinds.setdefault(", ".join(map(_spec_text, specs)), []).append(kind)
    parts = [f"{'/'.join(ks)}: {specs}" for specs, ks in kinds.items()]
    parts += [f"{k}={_value_text(v)}" for k, v in _leaves(fragment) if k != "attention"]
    text = "; ".join(parts) or "nothing: the plain Transformer"
    from synattn_trainer.plugin_registry import preset_owner

    plugin = preset_owner(name)
    note = NOTES.get(name) or (f"from {plugin.label()}" if plugin else None)
    return f"{text} ({note})" if note else text


def _spec_text(spec: dict[str, Any]) -> str:
    """A variant spec in a few words: ``rhe(sea=lpea) on layer 0``."""
    options = spec.get("options", {})
    text = str(spec["name"])
    if options:
        text += "(" + ", ".join(f"{k}={_value_text(v)}" for k, v in options.items()) + ")"
    layers = spec.get("layers", "all")
    if layers == "lower_half":
        text += " on the lower half"
    elif isinstance(layers, list):
        text += f" on layer{'s' if len(layers) > 1 else ''} {','.join(map(str, layers))}"
    return text


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(_value_text, value)) + "]"
    return str(value)


def _leaves(fragment: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted.key, value)`` for every non-mapping value; ``attention`` kept whole."""
    out: list[tuple[str, Any]] = []
    for key, value in fragment.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path != "attention":
            out += _leaves(value, f"{path}.")
        else:
            out.append((path, value))
    return out


class PresetError(ValueError):
    """A preset that cannot be applied to a config: ``loc`` is the key at fault."""

    def __init__(self, loc: tuple[str, ...], reason: str) -> None:
        super().__init__(f"{'.'.join(loc)}: {reason}")
        self.loc = loc
        self.reason = reason


def close_presets(name: str) -> str:
    """``close matches: a, b`` of the presets ``name`` is close to (case aside), or ``none is
    close``."""
    lower = {v.lower(): v for v in VARIANTS}
    close = [lower[c] for c in difflib.get_close_matches(name.lower(), lower, n=4, cutoff=0.6)]
    return f"close matches: {', '.join(close)}" if close else "none is close"


def unknown_preset(name: str) -> str:
    """Why ``name`` is refused, with the presets it is close to (case aside)."""
    hint = close_presets(name)
    return f"unknown preset {name!r}; {hint} (synattn presets lists all {len(VARIANTS)})"


def preset_fragment(name: object) -> dict[str, Any]:
    """A copy of the settings of preset ``name``.

    Raises:
        PresetError: ``name`` is not a string, or no preset has it (close matches named).
    """
    if not isinstance(name, str):
        raise PresetError(("preset",), f"a preset's name, not a {type(name).__name__}")
    if name not in VARIANTS:
        raise PresetError(("preset",), unknown_preset(name))
    return copy.deepcopy(VARIANTS[name])


def with_preset(raw: dict[str, Any]) -> dict[str, Any]:
    """A training config's mapping with its ``preset: NAME`` key replaced by that preset's
    settings (``preset: null``, or none: the mapping as it is, less the key).

    Experiments lay a preset over their base config (the preset's values win there) and let a
    grid's own fragment under a preset's name refine it (the fragment's win). A config that
    names a preset and sets a key itself could mean either, so neither wins silently:

    - a setting outside ``attention`` that the config gives too must agree with the preset's;
      a different value is refused, naming both (the config's own settings the preset does
      not touch are kept, the preset's added);
    - in ``attention`` the two compose per attention type, the preset's variants first, then
      the config's, under the rule every config follows (``check_composition``): at most one
      variant of a layer replaces the attention and one the aggregation; a clash between one
      of the preset's and one of the config's is refused, naming both;
    - a variant the preset also places on that attention type is a restatement when it is the
      same (name, layers, options: defaults count), else refused: a variant is placed once.

    So an accepted config equals the experiment path's configuration for that preset on the
    same config, wherever that config sets no variant list of an attention type the preset
    sets (the experiment path replaces such a list; here the lists compose).

    Raises:
        PresetError: unknown preset, or a setting or variant that contradicts it.
    """
    out = copy.deepcopy(raw)
    name = out.pop("preset", None)
    if name is None:
        return out
    fragment = preset_fragment(name)
    for key, value in fragment.items():
        if key == "attention":
            out[key] = _compose_attention(value, out.get(key), name)
        else:
            _agree(out, key, value, name, (key,))
    _check_replacements(out, fragment.get("attention", {}), name)
    return out


def _agree(node: dict[str, Any], key: str, value: Any, preset: str, loc: tuple[str, ...]) -> None:
    """Put the preset's ``value`` at ``node[key]``, where the config has none or the same."""
    if key not in node:
        node[key] = value
    elif isinstance(value, dict) and isinstance(node[key], dict):
        for k, v in value.items():
            _agree(node[key], k, v, preset, (*loc, k))
    elif node[key] != value:
        raise PresetError(
            loc,
            f"the config sets {_value_text(node[key])}, preset {preset!r} sets "
            f"{_value_text(value)}; keep one (synattn presets show {preset})",
        )


def _compose_attention(preset_att: dict[str, list[dict[str, Any]]], own: Any, preset: str) -> Any:
    """Per attention type, the preset's variants followed by the config's own (less those
    that restate one of the preset's); a malformed ``own`` is left to the config's checks."""
    if own is None:
        return preset_att
    if not isinstance(own, dict):
        return own
    out = dict(own)
    for kind, specs in preset_att.items():
        mine = out.get(kind) or []
        if isinstance(mine, list):
            out[kind] = [*specs, *(s for s in mine if not _restates(s, specs, kind, preset))]
    return out


def _restates(spec: Any, preset_specs: list[dict[str, Any]], kind: str, preset: str) -> bool:
    """Whether ``spec`` is one of ``preset_specs`` again; refused if it names one of their
    variants differently. A spec that does not validate is kept for the config's checks."""
    from pydantic import ValidationError

    same = [p for p in preset_specs if isinstance(spec, dict) and p["name"] == spec.get("name")]
    if not same:
        return False
    try:
        if any(_normal(spec) == _normal(p) for p in same):
            return True
    except ValidationError:
        return False
    raise PresetError(
        ("attention", kind),
        f"preset {preset!r} places {_spec_text(same[0])} and the config places "
        f"{_spec_text(spec)}; a variant is placed once per attention type: drop one, or write "
        f"the block out without `preset:` (synattn presets show {preset})",
    )


def _normal(spec: dict[str, Any]) -> tuple[Any, ...]:
    """A spec as compared: name, layers, options with their defaults."""
    from synattn_trainer.config_base import VariantSpec
    from synattn_trainer.variant_options import OPTIONS

    s = VariantSpec.model_validate(spec)
    options = OPTIONS[s.name].model_validate(s.options) if s.name in OPTIONS else s.options
    return (s.name, s.layers, options)


def _check_replacements(
    raw: dict[str, Any], preset_att: dict[str, list[dict[str, Any]]], preset: str
) -> None:
    """Refuse a layer where one of the preset's variants and one of the config's both take
    over the attention (or the aggregation), naming both. Anything malformed is skipped:
    the config's own checks report it."""
    from synattn_trainer.config_base import AttentionType, ModelConfig, VariantSpec
    from synattn_trainer.variant_options import variant_options

    try:
        model = ModelConfig.model_validate(raw.get("model", {}))
        composed = {k: [VariantSpec.model_validate(s) for s in raw["attention"][k]]
                    for k in preset_att}  # fmt: skip
    except (ValueError, TypeError, KeyError):
        return
    for kind, specs in composed.items():
        depth = model.enc_layers if kind == "enc_self" else model.dec_layers
        view = model.encoder_view() if kind == "enc_self" else model
        n = len(preset_att[kind])
        for layer in range(depth):
            taken: dict[str, str] = {}  # part -> the preset's variant that replaces it
            for i, spec in enumerate(specs):
                if not spec.covers(layer, depth):
                    continue
                try:
                    parts = variant_options(spec, view, cast(AttentionType, kind)).replaces()
                except ValueError:
                    continue
                for part in sorted(parts):
                    if i < n:
                        taken[part] = spec.name
                    elif part in taken:
                        raise PresetError(
                            ("attention", kind),
                            f"layer {layer}: {taken[part]!r} (from preset {preset!r}) and "
                            f"{spec.name!r} (the config's) both replace the {part}; at most "
                            "one variant per layer may: drop one, or drop `preset:`",
                        )


def unknown_variant(name: str) -> str:
    """Why ``name`` is no variant, pointing a preset's name to the ``preset`` key. A variant
    slot takes no preset: a preset may set several attention types and other sections
    (``disagreement+routing``, ``8L``), and eight share a variant's name, most with another
    placement (preset ``dea`` is DEA on layer 0, variant ``dea`` on every layer)."""
    from synattn_trainer.variant_options import unknown_variant_text

    return unknown_variant_text(name, preset=name in VARIANTS)
