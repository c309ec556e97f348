"""Analysis figures as PNG (matplotlib, no display): gate heatmaps, RHE label history, attention
heatmaps of one sentence."""

from __future__ import annotations

import json
import re
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from synattn_shared.atomic import atomic_write_with

TITLE_POINTS = 11
TITLE_CHARS_PER_INCH = 9  # at TITLE_POINTS, with room for wide letters
TITLE_LINE_INCHES = 0.22  # each wrapped title line adds this much height
STAT = re.compile(r"^(enc_self|dec_self|enc_dec)\.(\d+)\.(\w+)\.h(\d+)$")


def variant_history(metrics: Path) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Per stat (``gate``, ``important``): ``(update, {kind.layer.h: value})`` over training."""
    out: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    for line in metrics.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") != "variants":
            continue
        per: dict[str, dict[str, float]] = defaultdict(dict)
        for key, value in rec.items():
            m = STAT.match(key)
            if m:
                kind, layer, stat, head = m.groups()
                per[stat][f"{kind}.{layer}.h{head}"] = value
        for stat, values in per.items():
            out[stat].append((rec["update"], values))
    return dict(out)


def _grid(values: dict[str, float]) -> tuple[np.ndarray, list[str]]:
    layers = sorted(
        {k.rsplit(".h", 1)[0] for k in values},
        key=lambda s: (s.split(".")[0], int(s.split(".")[1])),
    )
    heads = 1 + max(int(k.rsplit(".h", 1)[1]) for k in values)
    grid = np.full((len(layers), heads), np.nan)
    for key, v in values.items():
        layer, head = key.rsplit(".h", 1)
        grid[layers.index(layer), int(head)] = v
    return grid, layers


def heatmap_png(
    grid: np.ndarray,
    rows: list[str],
    title: str,
    out: Path,
    cols: list[str] | None = None,
    spread: np.ndarray | None = None,
) -> Path:
    """A labelled heatmap with values in the cells (``± spread`` beside each, when given).

    The title is the figure's, wrapped to its width (a long one over a few heads was cut off
    at both edges: matplotlib does not wrap, and ``tight_layout`` makes room above, not
    beside)."""
    width = max(3.2, 1.0 + 0.6 * grid.shape[1])
    lines = textwrap.wrap(title, width=int(width * TITLE_CHARS_PER_INCH)) or [title]
    fig, ax = plt.subplots(
        figsize=(width, 1.0 + 0.5 * grid.shape[0] + TITLE_LINE_INCHES * (len(lines) - 1))
    )
    im = ax.imshow(
        grid, cmap="viridis", vmin=0.0, vmax=max(1.0, float(np.nanmax(grid))), aspect="auto"
    )
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xticks(
        range(grid.shape[1]),
        cols or [f"h{h}" for h in range(grid.shape[1])],
        rotation=90 if cols else 0,
    )
    if grid.size <= 400:
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(
                    j,
                    i,
                    f"{v:.2f}" if spread is None else f"{v:.2f}\n±{spread[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="w" if v < 0.6 else "k",
                )
    fig.suptitle("\n".join(lines), x=0.02, ha="left", fontsize=TITLE_POINTS)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(
        out, lambda tmp: fig.savefig(tmp, dpi=120, format="png", bbox_inches="tight")
    )
    plt.close(fig)
    return out


def dev_gate_values(metrics: Path) -> tuple[int, dict[str, float], dict[str, float]] | None:
    """The last ``gates_dev`` event: (update, mean per kind.layer.hN, std per kind.layer.hN)."""
    found = None
    for line in metrics.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") == "gates_dev":
            found = rec
    if found is None:
        return None
    means: dict[str, float] = {}
    stds: dict[str, float] = {}
    for key, value in found.items():
        m = STAT.match(key)
        if m:
            kind, layer, stat, head = m.groups()
            (means if stat == "gate" else stds)[f"{kind}.{layer}.h{head}"] = value
    return int(found["update"]), means, stds


def gate_heatmap(metrics: Path, out: Path, stat: str = "gate") -> Path:
    """Layers x heads heatmap of gated SLR's gate: the dev-set mean in eval mode (the
    gated-SLR paper's Fig. 3; each cell also shows the standard deviation over sentences) when
    the run logged it, else the last training batch's values of ``stat``."""
    dev = dev_gate_values(metrics) if stat == "gate" else None
    if dev is not None:
        update, means, stds = dev
        grid, layers = _grid(means)
        spread, _ = _grid(stds)
        title = f"gate per layer and head, dev set, eval mode (update {update}); mean ± std"
        return heatmap_png(grid, layers, title, out, spread=spread)
    history = variant_history(metrics).get(stat)
    if not history:
        raise ValueError(f"{metrics}: no '{stat}' values logged (is a gated variant configured?)")
    update, values = history[-1]
    grid, layers = _grid(values)
    return heatmap_png(grid, layers, f"{stat} per layer and head (update {update})", out)


def label_history(metrics: Path, out: Path) -> Path:
    """RHE: share of sentences for which each head was important, over training."""
    history = variant_history(metrics).get("important")
    if not history:
        raise ValueError(f"{metrics}: no RHE labels logged (is an rhe variant configured?)")
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in sorted(history[-1][1]):
        ax.plot([u for u, _ in history], [v.get(key, np.nan) for _, v in history], label=key)
    ax.set_xlabel("update")
    ax.set_ylabel("share of sentences: important")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("RHE head labels over training")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(out, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return out


def attention_pngs(
    probs: np.ndarray, queries: list[str], keys: list[str], title: str, out: Path
) -> Path:
    """One panel per head of ``probs`` ``[H, Tq, Tk]``, query tokens down, key tokens across."""
    h = probs.shape[0]
    cols = min(4, h)
    rows = (h + cols - 1) // cols
    width, height = 0.25 * len(keys) + 1.5, 0.25 * len(queries) + 1.5
    fig, axes = plt.subplots(rows, cols, figsize=(cols * width, rows * height), squeeze=False)
    for k in range(rows * cols):
        ax = axes[k // cols][k % cols]
        if k >= h:
            ax.axis("off")
            continue
        ax.imshow(probs[k], cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"head {k}", fontsize=8)
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=6)
        ax.set_yticks(range(len(queries)), queries, fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(out, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return out


def importance_histogram(importance: np.ndarray, out: Path) -> Path:
    """Histogram of the heads' importance values (HeadMask Figure 3)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(np.asarray(importance), bins=min(30, max(5, len(importance) // 3)))
    ax.set_xlabel("importance |dL/d xi|")
    ax.set_ylabel("heads")
    ax.set_title(f"mean {np.mean(importance):.3g}, variance {np.var(importance):.3g}")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(out, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return out


def masking_curves_png(
    schedule: dict[str, Any], curves: dict[str, list[float]], out: Path
) -> Path:
    """BLEU after masking groups of heads, most or least important first (HeadMask Figure 2)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for order, values in curves.items():
        xs = [len(m) for m in schedule[order]]
        ax.plot(xs, values, marker="o", label=f"{order} importance")
    ax.set_xlabel("masked heads")
    ax.set_ylabel("BLEU")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(out, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return out


def mask_heatmap(metrics: Path, out: Path) -> Path:
    """HeadMask: layers x heads, each head's share of the run's batches in which it was masked
    (``synattn_trainer.mask_frequency``)."""
    from synattn_trainer.mask_frequency import mask_records, shares

    records = mask_records(metrics)
    if not records:
        raise ValueError(f"{metrics}: no headmask records (is headmask.mode random or impt?)")
    grid, layers = _grid(shares(records))
    last = records[-1]["update"]
    title = f"share of training batches each head was masked in (updates 1-{last})"
    return heatmap_png(grid, layers, title, out)
