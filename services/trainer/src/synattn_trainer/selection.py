"""Which checkpoints make a run's final model (docs/papers/index.md, "Checkpoint averaging
only at the end of training"): the average of the last N saved
inside a final window of the run, the last checkpoint, or the best on validation loss.

Averaging is a convergence-time technique. The last N checkpoints of a short run saved once per
epoch reach back into warm-up and average a half-trained model into the result, so the trainer
refuses a configuration whose averaged checkpoints would start before the final ``window``
share of the updates, and at the end averages only checkpoints inside that window. Pure
functions of update numbers, so the refusal can be made at submit time, without torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def schedule(max_updates: int, every: int) -> list[int]:
    """Updates at which a run that reaches ``max_updates`` saves a scheduled checkpoint: every
    ``every`` updates (or epoch of ``every`` updates), and the final update."""
    if every < 1 or max_updates < 1:
        raise ValueError("max_updates and every must be >= 1")
    points = list(range(every, max_updates + 1, every))
    if not points or points[-1] != max_updates:
        points.append(max_updates)
    return points


def window_start(end: int, window: float) -> float:
    """The first update of the final ``window`` share of a run that ends at ``end``."""
    return end * (1.0 - window)


def last_in_window(saved: Sequence[int], n: int, end: int, window: float) -> list[int]:
    """The last ``n`` of the ``saved`` updates that lie inside the run's final window."""
    start = window_start(end, window)
    inside = [u for u in sorted(saved) if start - 1e-9 <= u <= end]
    return inside[-n:]


def averaging_error(
    max_updates: int, every: int, average_last: int, window: float, unit: str = "updates"
) -> str | None:
    """One line saying why averaging the last ``average_last`` checkpoints saved every
    ``every`` updates of a ``max_updates`` run reaches outside its final ``window``; None when
    it does not."""
    if average_last <= 1:
        return None
    picked = schedule(max_updates, every)[-average_last:]
    start = window_start(max_updates, window)
    if picked[0] >= start - 1e-9:
        return None
    often = int(max_updates * window) // (average_last - 1)
    hint = f"save every {often} updates or less, " if often >= 1 else ""
    return (
        f"averaging the last {average_last} checkpoints saved every {every} {unit} of a "
        f"{max_updates}-update run starts at update {picked[0]}, before its final "
        f"{window:.0%} (update {math.ceil(start)}): {hint}average fewer, or widen "
        f"train.average_window (docs/papers/index.md, 'Checkpoint averaging only at the end of "
        "training')"
    )
