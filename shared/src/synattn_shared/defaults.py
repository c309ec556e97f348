"""The specs' default hyper-parameters of the syntax features, written once.

Feature requests, the trainer's option models, the parser API, the CLI and the pure functions
all read them from here, so a default changed here changes everywhere. (``Final`` keeps each
string's literal type, so they fit the ``Literal`` aliases of the syntax modules.)
"""

from __future__ import annotations

from typing import Final

# Why each value: docs/papers/rhe-sea.md and docs/papers/gated-slr.md, "Decisions".
SLR_TAU: Final = 10.0  # soft SLR temperature: the gated-SLR paper's best
SLR_BINARIZE: Final = "right"  # Hou et al.'s released code
SLR_TIES: Final = "strict"
RP_CLIP: Final = 6  # LPEA clip distance k: the RHE paper's best
LP_OUTSIDE: Final = "clip"
SLA_M: Final = 3  # SLA window in dependency hops (its authors' released code)
