"""Plain progress lines for training whose output is not a terminal (a log file, CI, a pipe).

On a terminal the trainer draws a progress bar; elsewhere a bar is either invisible or a mess
of carriage returns, so one line per log interval says where the run is, as fairseq and
OpenNMT-py do: update, loss, learning rate, tokens/s and the time left at the rate so far.
"""

from __future__ import annotations

from typing import Any

from synattn_shared.progress import eta


def update_line(rec: dict[str, Any], total: int, first: int, elapsed: float) -> str:
    """One logged update: ``update 200/3,500 (5.7%) | loss 4.812 | lr 5.00e-04 | 2,104 tok/s |
    ETA 1:02:03``; ``first`` is the update this process started from (a resumed run)."""
    u = int(rec["update"])
    return (
        f"update {u:,}/{total:,} ({100 * u / max(total, 1):.1f}%) | loss {rec['loss']:.3f} | "
        f"lr {rec['lr']:.2e} | {rec['tokens_per_s']:,.0f} tok/s | "
        f"ETA {eta(max(total - u, 0), (u - first) / elapsed if elapsed > 0 else 0.0)}"
    )


def epoch_line(rec: dict[str, Any]) -> str:
    """One epoch's validation: ``epoch 3 | update 381 | valid loss 5.629 | ppl 786.8`` (and
    the masked loss of a HeadMask run, and BLEU when the epoch scored it)."""
    parts = [f"epoch {rec['epoch']}", f"update {rec['update']:,}",
             f"valid loss {rec['valid_loss']:.3f}", f"ppl {rec['valid_ppl']:.1f}"]  # fmt: skip
    if "valid_loss_masked" in rec:
        parts.append(f"masked {rec['valid_loss_masked']:.3f}")
    if "valid_bleu" in rec:
        parts.append(f"BLEU {rec['valid_bleu']:.2f}")
    return " | ".join(parts)
