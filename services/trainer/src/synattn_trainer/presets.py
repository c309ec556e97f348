"""Named attention-variant presets: config fragments (``attention``, ``headmask``, ``model``,
``data``) that turn a vanilla training config into each paper's setting. Benchmarks and
experiment grids name variants by these keys; a grid may also give its own fragment.

Each preset cites the table of its paper it follows. Seed 001 trained with OpenNMT-py (stated),
whose source has no ``</s>``: its presets set ``data.source_eos: false`` and its baseline is
``8L``. Seed 000's source ended in ``<EOS>`` (its Fig. 5; RHE's confidence measure counts the
mass on it), so its presets keep the default ``</s>`` and compare with ``vanilla`` (DECISIONS.md
§1, revised).
"""

from __future__ import annotations

from typing import Any

ENC_L0 = {"layers": [0]}
ALL_TYPES = ("enc_self", "dec_self", "enc_dec")
NO_SOURCE_EOS = {"data": {"source_eos": False}}


def _enc(*specs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"attention": {"enc_self": list(specs)}, **extra}


# seed 000 (RHE): SEA/RHE on the first encoder layer only ("we only enhance the first layer",
# §5.4 and its layer table); Rel_Pos on every layer (Shaw et al.); Localness on the lower
# layers (Yang et al.: layers 1-3 of 6; rule here: the lower half, ceil(L/2) layers). Source
# </s> kept: the paper's Fig. 5 source ends in <EOS> (DECISIONS.md §1).
REL_POS = {"name": "rel_pos"}
LOCALNESS = {"name": "localness", "layers": "lower_half"}
SEED_000: dict[str, dict[str, Any]] = {
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

# seed 001 (fixed patterns), Tables 1-2: 7 fixed + 1 learned head in every encoder layer,
# token- or word-based; 8F all fixed; 1L one learned head (d_h = d); 8L is vanilla.
SEED_001: dict[str, dict[str, Any]] = {
    "fixed-token": _enc({"name": "fixed"}, **NO_SOURCE_EOS),
    "fixed-word": _enc({"name": "fixed", "options": {"word_based": True}}, **NO_SOURCE_EOS),
    "8F": _enc({"name": "fixed", "options": {"fixed": 8}}, **NO_SOURCE_EOS),
    "1L": {"model": {"enc_heads": 1}, **NO_SOURCE_EOS},
    "8L": {**NO_SOURCE_EOS},  # the paper's learned baseline (vanilla without source </s>)
}

# seed 002 (HeadMask), Tables 2-4 (its Table 1 lists the data sets): N = 12.5% of the heads
# masked per batch (18 of 144 there).
SEED_002: dict[str, dict[str, Any]] = {
    "headmask-random": {"headmask": {"mode": "random"}},
    "headmask-impt": {"headmask": {"mode": "impt"}},
}

# seed 003 (gated SLR). Table 2 tunes the pre-warm-up K (50-80 epochs of a run whose length the
# paper does not state) and the ignore rate p (0-0.4; IWSLT De-En: K = 80, p = 0.4). K is
# expressed as a share of the planned updates so it scales to short budgets: 0.4 of the run,
# and p = 0.2 (NC11's, the middle of the paper's range). Table 7 "All" = BatchNorm + pre-warm-up
# + syntax ignoring; "BatchNorm" alone is slr-gated-bn. Table 6 "Avg" and "Pure"; Pure follows
# Hou et al. (METHODS-syntax §2.5) and Table 5: the first two heads of the first layer.
SEED_003: dict[str, dict[str, Any]] = {
    "slr-gated": _enc(
        {"name": "slr", "options": {"mode": "gated", "prewarm_fraction": 0.4, "ignore_p": 0.2}}
    ),
    "slr-gated-bn": _enc({"name": "slr", "options": {"mode": "gated"}}),
    "slr-avg": _enc({"name": "slr", "options": {"mode": "avg"}}),
    "slr-pure": _enc({"name": "slr", "options": {"mode": "pure", "heads": [0, 1]}, **ENC_L0}),
    "lisa": _enc({"name": "lisa", **ENC_L0}),  # Table 3 baselines (METHODS-syntax §7.3-7.5)
    "pascal": _enc({"name": "pascal", **ENC_L0}),
    "sla": _enc({"name": "sla"}),
}

# seed 004 (diversity): disagreement terms compared in Table 1 (encoder only there); Table 2
# finds all three attention types best, the default here (disagreement-enc is the public code's
# encoder-only setting, DECISIONS.md §5). EM routing on "the low-level two layers of the
# encoder" (Table 4, Row 5). Table 5: both together, with the Output term (Table 1's best).
ROUTING_EM = {"name": "routing", "layers": [0, 1]}
SEED_004: dict[str, dict[str, Any]] = {
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

VARIANTS: dict[str, dict[str, Any]] = {
    "vanilla": {},
    **SEED_000,
    **SEED_001,
    **SEED_002,
    **SEED_003,
    **SEED_004,
}


def merge(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``fragment`` merged in: nested mappings merge, anything else replaces."""
    out = dict(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
