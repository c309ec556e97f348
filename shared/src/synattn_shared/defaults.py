"""The specs' default hyper-parameters of the syntax features, written once.

Feature requests, the trainer's option models, the parser API, the CLI and the pure functions
all read them from here, so a default changed here changes everywhere. (``Final`` keeps each
string's literal type, so they fit the ``Literal`` aliases of the syntax modules.)
"""

from __future__ import annotations

from typing import Final

SLR_TAU: Final = 10.0  # soft SLR temperature: seed 003's best (METHODS-syntax §2.4)
SLR_BINARIZE: Final = "right"  # Hou et al.'s code (§2.3 decision)
SLR_TIES: Final = "strict"
RP_CLIP: Final = 6  # LPEA clip distance k: seed 000's best (§4.4)
LP_OUTSIDE: Final = "clip"
SLA_M: Final = 3  # SLA window in dependency hops (§7.5)
