"""Training speed at the Transformer-base shape on a GPU: target tokens/s, model FLOPs
utilisation (MFU), and every attention preset's speed relative to vanilla, in one run.

The shape is Transformer-base (6+6 layers, d=512, FFN 2048, 8 heads, tied embeddings) on real
Multi30k batches of about ``--max-tokens`` target tokens (parsed once by spaCy and cached with
``bench/training/variants.py``'s cache, an 8k joint vocabulary), in bf16 autocast
(``precision: auto``).
Each timed update is the trainer's own ``Trainer.step`` (batch building, HeadMask gates, forward,
backward, clipping, fused Adam, schedule), with the device synchronised around the timing.
Repeats are interleaved over the presets so drift hits them alike; figures are medians.

MFU: the FLOPs of vanilla's updates on the timed batches are counted by torch's
``FlopCounterMode`` (every matmul and attention kernel of the forward and backward, under the
same autocast), divided by their target tokens, times the measured tokens/s, over the device's
dense bf16 peak (a table of known devices; ``--peak-tflops`` for others). Goals (issue 27):
vanilla MFU >= 35%, bias and mask variants >= 0.9x vanilla.

``--loader-workers 0 8`` times every preset with its batches built inline and built ahead in 8
processes (``synattn_trainer.prefetch``), side by side: the first H200 run showed the syntax
variants starved by batch building on the CPU. The vanilla figures are for the faster setting.

A preset that fails on the device is reported with its error, not skipped in silence. The
figures go to ``results/gpu/<device>.json`` (``--out``) and to stdout.

    python bench/gpu/gpu.py                                 # all presets, on the CUDA device
    python bench/gpu/gpu.py --variants vanilla dea lpea --compile
    python bench/gpu/gpu.py --shards build/m30k            # `make data`'s shards, no parsing
    python bench/gpu/gpu.py --device cpu --shape tiny8 --updates 2 --repeats 1 --pairs 500  # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from synattn_trainer.config import TrainConfig
from synattn_trainer.model import count_parameters
from synattn_trainer.presets import VARIANTS, merge
from synattn_trainer.train import Trainer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import variants as bench_variants  # noqa: E402  bench/training/variants.py: its data cache, timed loop

SHAPES: dict[str, dict[str, Any]] = {
    "base": {"enc_layers": 6, "dec_layers": 6, "d_model": 512, "d_ff": 2048, "heads": 8},
    "tiny8": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8},
}

# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, in TFLOP/s; the first
# pattern that matches torch.cuda.get_device_name() wins.
BF16_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"H100.*PCIe", 756.0),
    (r"GH200|H200|H100", 989.4),
    (r"A100", 312.0),
    (r"L40S", 362.1),
    (r"\bL4\b", 121.0),
)

# what a preset adds to plain attention; the 0.9x goal is for "bias" and "mask"
KIND = {
    "dea": "mask", "lpea": "bias", "slr-pure": "bias", "localness": "bias", "rel_pos": "bias",
    "8L": "no source </s>", "headmask-impt": "one extra forward+backward",
    "headmask-random": "gates",
}  # fmt: skip
RATIO_GOAL = 0.9
MFU_GOAL = 0.35


def shards_base(variants: list[str], shards: Path, shape: str) -> dict[str, Any]:
    """The base configuration of the GPU bench's companion scripts on ``make data``'s shards
    (``shards``/train, valid and tokenizer.json) at ``shape``, bf16 autocast where available;
    exits with a one-line reason for an unknown preset or a folder without those files."""
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    if not (shards / "train").is_dir() or not (shards / "tokenizer.json").is_file():
        raise SystemExit(f"--shards {shards}: no train/ and tokenizer.json (make data)")
    return {
        "data": {"train": str(shards / "train"), "valid": str(shards / "valid"),
                 "max_len": 128, "tokenizer": str(shards / "tokenizer.json")},
        "model": SHAPES[shape],
        "optim": {"lr": 1e-4, "warmup": 4000},
        "train": {"precision": "auto"},
    }  # fmt: skip


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a known GPU, or None."""
    for pattern, peak in BF16_PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return peak
    return None


def device_label(device: torch.device) -> str:
    """The device's marketing name (``NVIDIA H100 80GB HBM3``) or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def slug(name: str) -> str:
    """A file name for a device name: ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def mfu(tokens_per_s: float, flops_per_token: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s over the peak (TFLOP/s), None without a peak."""
    if peak is None or not math.isfinite(tokens_per_s * flops_per_token):
        return None
    return tokens_per_s * flops_per_token / (peak * 1e12)


def flops_per_token(
    cfg: TrainConfig, updates: int, max_tokens: int, device: torch.device
) -> float:
    """FLOPs of one update per target token, counted over ``updates`` batches (forward and
    backward of every matmul and attention kernel; the optimiser is elementwise and left out)."""
    eager = cfg.model_copy(update={"train": cfg.train.model_copy(update={"compile": False})})
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as out:
        trainer = Trainer(eager, out, device=device, progress=False)
        counter = FlopCounterMode(display=False)
        tokens = 0
        with counter:
            for index in bench_variants.timed_batches(trainer, max_tokens, updates):
                tokens += trainer.step([index]).tokens
        return counter.get_total_flops() / max(tokens, 1)


def run(
    base: dict[str, Any],
    names: list[str],
    device: torch.device,
    *,
    warmup: int,
    updates: int,
    repeats: int,
    max_tokens: int,
    peak: float | None,
    loader_workers: Sequence[int] = (0,),
    warm_rounds: int = 0,
) -> dict[str, Any]:
    """Time every preset at every ``loader_workers`` setting (0: batches built inline; N:
    built ahead in N processes), repeats interleaved, and count vanilla's FLOPs; the report as
    a dict. Each row's ``x_vanilla`` is against vanilla at the same setting, ``x_inline``
    against the same preset built inline (when 0 is among the settings).

    The first ``warm_rounds`` rounds are run and reported (``warm_repeats``) but not counted:
    on the first GPU run every preset's first repeat was the slowest by far (vanilla 51k and
    34k target tokens/s against 196k), as the allocator's pool and the kernels' choices for
    that preset's shapes were still being made, which ``warmup`` updates of other batches
    do not cover.

    With ``compile`` on, each preset keeps one trainer through every round, so its forward is
    compiled once (a fresh trainer per measurement compiled afresh each time: the first H100
    lease saw nothing finish in 4 minutes); the first measurement's wall time, compiling
    included, is reported as ``first_measurement_s``."""
    names = ["vanilla", *[n for n in names if n != "vanilla"]]
    settings = list(dict.fromkeys(loader_workers)) or [0]
    configs = {n: TrainConfig.model_validate(merge(base, VARIANTS[n])) for n in names}
    keys = [(n, w) for w in settings for n in names]
    rates: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
    warm: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
    memory: dict[tuple[str, int], int] = {}
    errors: dict[tuple[str, int], str] = {}
    first: dict[str, float] = {}
    keep = bool(base["train"].get("compile"))
    trainers: dict[str, Trainer] = {}
    scratch = tempfile.TemporaryDirectory(prefix="bench-gpu-")
    for round_ in range(warm_rounds + repeats):
        for key in keys:
            if key in errors:
                continue
            name, workers = key
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            began = time.perf_counter()
            try:
                if keep and name not in trainers:
                    trainers[name] = Trainer(
                        configs[name], Path(scratch.name) / name, device=device, progress=False
                    )
                rate = bench_variants.measure(
                    configs[name], warmup, updates, max_tokens, device, loader_workers=workers,
                    trainer=trainers.get(name),
                )  # fmt: skip
            except Exception as exc:  # a preset that breaks on this device is a finding
                errors[key] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
                continue
            (warm if round_ < warm_rounds else rates)[key].append(rate)
            first.setdefault(name, time.perf_counter() - began)
            kind = "warm" if round_ < warm_rounds else "timed"
            print(
                f"  {kind} round {round_}: {name} (loader {workers}) {rate:,.0f} target tokens/s",
                file=sys.stderr,
                flush=True,
            )  # a cut-off run still says how far
            if device.type == "cuda":
                memory[key] = max(memory.get(key, 0), torch.cuda.max_memory_allocated(device))
    trainers.clear()
    scratch.cleanup()
    for w in settings:
        if ("vanilla", w) in errors:
            raise SystemExit(f"vanilla failed on {device}: {errors[('vanilla', w)]}")
    fpt = flops_per_token(configs["vanilla"], updates, max_tokens, device)
    vanilla = {w: statistics.median(rates[("vanilla", w)]) for w in settings}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as out:
        params = count_parameters(
            Trainer(configs["vanilla"], out, device=device, progress=False).model
        )
    rows = []
    for name, workers in keys:
        row: dict[str, Any] = {"variant": name, "loader_workers": workers,
                               "kind": KIND.get(name, "explicit attention")}  # fmt: skip
        if name == "vanilla":
            row["kind"] = "fused SDPA"
        if (name, workers) in errors:
            row["error"] = errors[(name, workers)]
        else:
            med = statistics.median(rates[(name, workers)])
            row |= {"tokens_per_s": med, "repeats": rates[(name, workers)],
                    "warm_repeats": warm[(name, workers)],
                    "x_vanilla": med / vanilla[workers]}  # fmt: skip
            if workers and rates.get((name, 0)):
                row["x_inline"] = med / statistics.median(rates[(name, 0)])
            if row["kind"] in ("bias", "mask"):
                row["meets_goal"] = med / vanilla[workers] >= RATIO_GOAL
        if name in first and keep:
            row["first_measurement_s"] = first[name]
        if (name, workers) in memory:
            row["peak_memory_gib"] = memory[(name, workers)] / 2**30
        rows.append(row)
    best = max(settings, key=lambda w: vanilla[w])
    van_mfu = mfu(vanilla[best], fpt, peak)
    return {
        "device": device_label(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "shape": base["model"],
        "parameters": params,
        "precision": "bf16 autocast" if device.type == "cuda" else "fp32",
        "compile": base["train"].get("compile", False),
        "cudnn_attention": base["train"].get("cudnn_attention", False),
        "max_tokens": max_tokens,
        "warmup_updates": warmup,
        "timed_updates": updates,
        "repeats": repeats,
        "warm_rounds": warm_rounds,
        "loader_workers": settings,
        "flops_per_target_token": fpt,
        "peak_bf16_tflops": peak,
        "vanilla_loader_workers": best,  # the setting the vanilla figures below are for
        "vanilla_tokens_per_s": vanilla[best],
        "vanilla_tflops": vanilla[best] * fpt / 1e12,
        "vanilla_mfu": van_mfu,
        "vanilla_by_loader_workers": {
            str(w): {"tokens_per_s": v, "mfu": mfu(v, fpt, peak)} for w, v in vanilla.items()
        },
        "goals": {"vanilla_mfu": MFU_GOAL, "bias_mask_x_vanilla": RATIO_GOAL},
        "vanilla_meets_mfu_goal": None if van_mfu is None else van_mfu >= MFU_GOAL,
        "variants": rows,
    }


def render(report: dict[str, Any]) -> str:
    """The report as the table the script prints."""
    m = report["vanilla_mfu"]
    lines = [
        f"{report['device']}, torch {report['torch']} (CUDA {report['cuda']}), "
        f"{report['precision']}, compile={report['compile']}, "
        f"cudnn_attention={report.get('cudnn_attention', False)}; shape {report['shape']}, "
        f"{report['parameters']:,} parameters; ~{report['max_tokens']} target tokens per "
        f"update, {report['timed_updates']} timed updates, median of {report['repeats']}",
        f"vanilla (loader {report.get('vanilla_loader_workers', 0)}): "
        f"{report['vanilla_tokens_per_s']:,.0f} target tokens/s, "
        f"{report['flops_per_target_token'] / 1e6:.1f} MFLOP per target token, "
        f"{report['vanilla_tflops']:.1f} TFLOP/s"
        + (f", MFU {m:.1%} of {report['peak_bf16_tflops']} TFLOP/s" if m is not None else ""),
    ]
    width = max(12, *(len(r["variant"]) for r in report["variants"]))
    lines.append(
        f"{'variant':<{width}} {'loader':>6} {'tokens/s':>10} {'x vanilla':>9} "
        f"{'x inline':>8} {'GiB':>6}  kind"
    )
    for r in report["variants"]:
        head = f"{r['variant']:<{width}} {r.get('loader_workers', 0):>6}"
        gib = f"{r['peak_memory_gib']:6.1f}" if "peak_memory_gib" in r else f"{'-':>6}"
        if "error" in r:
            lines.append(f"{head} {'failed':>10} {'-':>9} {'-':>8} {gib}  {r['error']}")
            continue
        inline = f"{r['x_inline']:8.2f}" if "x_inline" in r else f"{'-':>8}"
        lines.append(
            f"{head} {r['tokens_per_s']:10,.0f} {r['x_vanilla']:9.2f} {inline} {gib}  {r['kind']}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="base")
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--warm-rounds", type=int, default=1,
        help="rounds over every preset run first and not counted (the first GPU run's first "
        "repeat of each preset was the slowest by far)",
    )  # fmt: skip
    ap.add_argument("--pairs", type=int, default=29000, help="Multi30k training pairs to parse")
    ap.add_argument("--compile", action="store_true", help="torch.compile the training forward")
    ap.add_argument(
        "--cudnn-attention", action="store_true",
        help="let SDPA choose cuDNN's attention (train.cudnn_attention; the trainer's default "
        "keeps it off), to time the two in one lease",
    )  # fmt: skip
    ap.add_argument(
        "--loader-workers", type=int, nargs="+", default=[0], metavar="N",
        help="processes building batches ahead (0: inline); several values are timed side by "
        "side, e.g. 0 8",
    )  # fmt: skip
    ap.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument(
        "--shards", type=Path,
        help="a `make data` folder (train/ and tokenizer.json) to use instead of parsing "
        "--pairs pairs (a machine without spaCy: the lent GPU, bench/gpu/gpu_device.sh)",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, help="report JSON (default results/gpu/<device>.json)")
    args = ap.parse_args()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here (CPU-only torch?); try --device cpu for a smoke run")
    if args.shards:
        shards, tokenizer = args.shards / "train", args.shards / "tokenizer.json"
        if not (shards.is_dir() and tokenizer.is_file()):
            raise SystemExit(f"--shards {args.shards}: no train/ and tokenizer.json (make data)")
    else:
        shards = bench_variants.prepare(args.data_dir, args.pairs, vocab=8000)
        tokenizer = bench_variants.tokenizer_path(args.pairs, 8000)
    base = {
        "data": {"train": str(shards), "valid": str(shards), "max_len": 128,
                 "tokenizer": str(tokenizer)},
        "model": SHAPES[args.shape],
        "optim": {"lr": 1e-4, "warmup": 4000},
        "train": {"precision": "auto", "compile": args.compile,
                  "cudnn_attention": args.cudnn_attention},
    }  # fmt: skip
    peak = args.peak_tflops or (
        peak_tflops(device_label(device)) if device.type == "cuda" else None
    )
    report = run(base, args.variants, device, warmup=args.warmup, updates=args.updates,
                 repeats=args.repeats, max_tokens=args.max_tokens, peak=peak,
                 loader_workers=args.loader_workers,
                 warm_rounds=args.warm_rounds)  # fmt: skip
    report["command"] = "python bench/gpu/gpu.py " + " ".join(sys.argv[1:])
    print(render(report))
    out = args.out or REPO / "results" / "gpu" / f"{slug(report['device'])}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"written {out}")


if __name__ == "__main__":
    main()
