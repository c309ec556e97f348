"""Where one training update's time goes, for one preset at Transformer-base: torch.profiler
over ``--updates`` updates of ``Trainer.step`` after ``--warmup`` untimed ones, with the
operators that cost the most device time and the most host time, and the share of the wall
time the device was busy.

Why: on the first GPU run vanilla reached 8-10% MFU (63-84 ms per 16k-token update where 35%
MFU is about 19 ms) and nothing said where the rest went: the host (Python, launches, batch
building, synchronisations) or the device (kernels slower than their FLOPs). A device busy
most of the wall time points at the kernels; one mostly idle, at the host.

    python bench/gpu/gpu_profile.py --shards build/gpu-kit                  # vanilla, on CUDA
    python bench/gpu/gpu_profile.py --shards build/gpu-kit --variants vanilla dea \
        --loader-workers 8
    python bench/gpu/gpu_profile.py --shards build/m30k --device cpu --shape tiny8 --updates 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from synattn_trainer.config import TrainConfig
from synattn_trainer.presets import VARIANTS, merge
from synattn_trainer.train import Trainer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu  # noqa: E402  bench/gpu/gpu.py: the shapes
import variants as bench_variants  # noqa: E402  bench/training/variants.py: the timed batches


def _device_us(event: Any) -> float:
    """An operator's own device time in µs (torch renamed ``cuda`` to ``device`` fields)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def device_busy_us(events: Any) -> float:
    """The device's busy time in µs: the own time of the events that ran on the device
    (kernels, copies, memsets). A host operator's own device time is the time of the kernels
    it launched, so a sum over every event counts the device's work twice; the first H100
    profiles (results/gpu/) were summed that way."""
    return sum(_device_us(e) for e in events if e.device_type != DeviceType.CPU)


def profile_updates(
    cfg: TrainConfig,
    device: torch.device,
    *,
    warmup: int,
    updates: int,
    max_tokens: int,
    loader_workers: int = 0,
    top: int = 15,
) -> dict[str, Any]:
    """Profile ``updates`` training updates: wall time per update, the device's busy share, and
    the ``top`` operators by own device time and by own host time."""
    torch.manual_seed(0)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as out:
        trainer = Trainer(cfg, out, device=device, progress=False)
        n = warmup + updates
        with bench_variants.timed_items(trainer, max_tokens, n, loader_workers) as items:
            for _ in range(warmup):
                trainer.step([next(items)])
            bench_variants.sync(device)
            tokens = 0
            with profile(activities=activities) as prof:
                start = time.perf_counter()
                for item in items:
                    tokens += trainer.step([item]).tokens
                bench_variants.sync(device)
                wall = time.perf_counter() - start
    events = prof.key_averages()
    device_us = device_busy_us(events)

    def rows(key: Any) -> list[dict[str, Any]]:
        ranked = sorted(events, key=key, reverse=True)[:top]
        return [
            {
                "op": e.key,
                "calls": e.count,
                "self_device_ms": _device_us(e) / 1000,
                "self_host_ms": e.self_cpu_time_total / 1000,
                "on_device": e.device_type != DeviceType.CPU,  # a kernel, not its operator
            }
            for e in ranked
        ]

    return {
        "updates": updates,
        "loader_workers": loader_workers,
        "target_tokens": tokens,
        "wall_ms_per_update": 1000 * wall / updates,
        "tokens_per_s": tokens / wall,
        "device_busy_share": (device_us / 1e6) / wall if device.type == "cuda" else None,
        "by_device_time": rows(_device_us) if device.type == "cuda" else [],
        "by_host_time": rows(lambda e: e.self_cpu_time_total),
    }


def render(name: str, report: dict[str, Any]) -> str:
    busy = report["device_busy_share"]
    lines = [
        f"{name} (loader {report['loader_workers']}): {report['wall_ms_per_update']:.1f} ms per "
        f"update, {report['tokens_per_s']:,.0f} target tokens/s"
        + (f", device busy {busy:.0%} of the wall time" if busy is not None else "")
    ]
    for title, key in (("own device time", "by_device_time"), ("own host time", "by_host_time")):
        if report[key]:
            lines.append(f"  top operators by {title} (ms over {report['updates']} updates):")
            for r in report[key]:
                lines.append(
                    f"    {r['self_device_ms']:9.1f} dev {r['self_host_ms']:9.1f} host "
                    f"{r['calls']:6d}x  {r['op'][:70]}"
                )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--variants", nargs="*", default=["vanilla"])
    ap.add_argument("--shards", type=Path, default=REPO / "build" / "gpu-kit")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", choices=sorted(gpu.SHAPES), default="base")
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--loader-workers", type=int, default=0)
    ap.add_argument("--out", type=Path, help="the reports as JSON")
    args = ap.parse_args()
    base = gpu.shards_base(args.variants, args.shards, args.shape)
    device = torch.device(args.device)
    reports = {}
    for name in args.variants:
        cfg = TrainConfig.model_validate(merge(base, VARIANTS[name]))
        reports[name] = profile_updates(
            cfg, device, warmup=args.warmup, updates=args.updates, max_tokens=args.max_tokens,
            loader_workers=args.loader_workers,
        )  # fmt: skip
        print(render(name, reports[name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(reports, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
