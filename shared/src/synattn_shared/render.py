"""Plain-text rendering of a sentence's matrices for ``synattn inspect``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synattn_shared.syntax.dependency import HOPS_UNREACHABLE
from synattn_shared.syntax.phrase import RP_OUT


def _cell(value: object, decimals: int) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (float, np.floating)):
        if np.isneginf(value):
            return "-inf"
        return f"{float(value):.{decimals}f}"
    return str(value)


def render_matrix(
    matrix: np.ndarray, labels: Sequence[str], decimals: int = 2, sentinel: str | None = None
) -> str:
    """A labelled text table: rows = queries, columns = keys.

    ``sentinel`` names what to show for ``RP_OUT`` (RP) and 255 (dep hops) cells.
    """
    cells = [[_cell(v, decimals) for v in row] for row in matrix]
    if sentinel:
        special = {str(RP_OUT), str(HOPS_UNREACHABLE)}
        cells = [[sentinel if c in special else c for c in row] for row in cells]
    width = max([len(c) for row in cells for c in row] + [len(x) for x in labels] + [1])
    label_w = max(len(x) for x in labels)
    head = " " * (label_w + 2) + " ".join(x[:width].rjust(width) for x in labels)
    lines = [head]
    for lab, row in zip(labels, cells, strict=True):
        lines.append(f"{lab.ljust(label_w)}  " + " ".join(c.rjust(width) for c in row))
    return "\n".join(lines)
