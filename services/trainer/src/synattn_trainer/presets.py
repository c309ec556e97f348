"""Named attention-variant presets: config fragments (``attention`` and/or ``headmask``) that
turn a vanilla training config into each paper's setting. Benchmarks and experiment grids
name variants by these keys; a grid may also give its own fragment.
"""

from __future__ import annotations

from typing import Any

ENC_L0 = {"layers": [0]}
ALL_TYPES = ("enc_self", "dec_self", "enc_dec")
VARIANTS: dict[str, dict[str, Any]] = {  # config fragments: "attention" and/or "headmask"
    "vanilla": {},
    "dea": {"attention": {"enc_self": [{"name": "dea", **ENC_L0}]}},
    "lpea": {"attention": {"enc_self": [{"name": "lpea", **ENC_L0}]}},
    "rhe+dea": {"attention": {"enc_self": [{"name": "rhe", **ENC_L0}]}},
    "rhe+lpea": {
        "attention": {"enc_self": [{"name": "rhe", "options": {"sea": "lpea"}, **ENC_L0}]}
    },
    "slr-pure": {"attention": {"enc_self": [{"name": "slr", "options": {"mode": "pure"}}]}},
    "slr-gated": {"attention": {"enc_self": [{"name": "slr", "options": {"mode": "gated"}}]}},
    "rel_pos": {"attention": {"enc_self": [{"name": "rel_pos"}]}},
    "localness": {"attention": {"enc_self": [{"name": "localness", "layers": [0, 1]}]}},
    "lisa": {"attention": {"enc_self": [{"name": "lisa", **ENC_L0}]}},
    "pascal": {"attention": {"enc_self": [{"name": "pascal", **ENC_L0}]}},
    "sla": {"attention": {"enc_self": [{"name": "sla"}]}},
    "fixed-token": {"attention": {"enc_self": [{"name": "fixed"}]}},
    "1L": {"model": {"enc_heads": 1}},  # fixed-pattern paper's baseline: one learned head
    "fixed-word": {
        "attention": {"enc_self": [{"name": "fixed", "options": {"word_based": True}}]}
    },
    "headmask-random": {"headmask": {"mode": "random"}},
    "headmask-impt": {"headmask": {"mode": "impt"}},
    "disagreement-output": {
        "attention": {
            t: [{"name": "disagreement", "options": {"term": "output"}}] for t in ALL_TYPES
        }
    },
    "routing-em": {"attention": {"enc_self": [{"name": "routing", "layers": [0, 1]}]}},
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
