"""How often HeadMask masked each head over a run, from its ``headmask`` log records.

Why: a head masked in a batch gets no gradient from it. Impt-N is meant to rotate its masks
(the paper: importance made flatter, no "super" heads); a head masked in most batches instead
barely trains, and is switched on at test time. The records (``train.Trainer``) hold each
head's share of the batches of one log interval; this module weighs them by batch counts into
windows and a whole-run share, and names the heads masked in most batches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

OFTEN = 0.5  # a head masked in at least this share of a window's batches is "often masked"


def mask_records(metrics: Path) -> list[dict[str, Any]]:
    """The run's ``headmask`` records in order ([] for a run that masked nothing)."""
    out = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") == "headmask":
            out.append(rec)
    return out


def head_key(key: str) -> str | None:
    """``enc_self.0.masked.h3`` -> ``enc_self.0.h3``; None for keys that are not a head's."""
    parts = key.split(".")
    if len(parts) == 4 and parts[2] == "masked" and parts[3].startswith("h"):
        return f"{parts[0]}.{parts[1]}.{parts[3]}"
    return None


def shares(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each head's share of all batches of ``records`` it was masked in (batch-weighted)."""
    batches = sum(r["batches"] for r in records)
    total: dict[str, float] = {}
    for r in records:
        for key, value in r.items():
            head = head_key(key)
            if head is not None:
                total[head] = total.get(head, 0.0) + value * r["batches"]
    return {h: round(v / batches, 4) for h, v in total.items()} if batches else {}


def summary(metrics: Path, window: int = 500) -> dict[str, Any]:
    """The run's mask shares: whole run, and per window of ``window`` updates (the heads masked
    in at least half its batches, how many distinct heads were masked at all, and the share of
    masked heads whose output raised the batch's loss, for Impt-N)."""
    records = mask_records(metrics)
    if not records:
        return {}
    last = max(r["update"] for r in records)
    windows = []
    for start in range(0, last, window):
        part = [r for r in records if start < r["update"] <= start + window]
        if not part:
            continue
        s = shares(part)
        harmful = [(r["harmful_share"], r["batches"]) for r in part if "harmful_share" in r]
        w = sum(b for _, b in harmful)
        windows.append({
            "updates": [start + 1, min(start + window, last)],
            "batches": sum(r["batches"] for r in part),
            "often_masked": sorted(h for h, v in s.items() if v >= OFTEN),
            "heads_ever_masked": sum(1 for v in s.values() if v > 0),
            "top_share": max(s.values()),
            "harmful_share": round(sum(h * b for h, b in harmful) / w, 4) if w else None,
            "shares": s,
        })  # fmt: skip
    run = shares(records)
    return {
        "window_updates": window,
        "run_shares": run,
        "often_masked_last_window": windows[-1]["often_masked"] if windows else [],
        "windows": windows,
        "entropy_bits": _entropy(run),
    }


def _entropy(s: dict[str, float]) -> float:
    """Entropy (bits) of the masked heads' distribution: log2(G) when every head is masked
    equally often, log2(N) when the same N heads are always masked."""
    total = sum(s.values())
    if total <= 0:
        return 0.0
    return round(-sum(v / total * math.log2(v / total) for v in s.values() if v > 0), 4)
