"""How long one training batch takes to build on the CPU, per preset: the padding and the
syntax tensors ``make_batch`` adds (dependency masks, SLR biases, phrase positions), at
Transformer-base's batch of about ``--max-tokens`` target tokens, on one thread, with vanilla's
(token ids only) as the baseline measured in the same run.

Why: on the first GPU run the syntax presets trained at 0.2-0.45x of vanilla; a batch that
takes longer to build than the GPU takes to train on it starves the GPU unless it is built
ahead (``Trainer(loader_workers=N)``). Medians over ``--batches`` batches.

    python bench/gpu/batch_build.py              # make data's shards, the GPU bench's presets
    python bench/gpu/batch_build.py --variants vanilla dea --shards build/gpu-kit
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from synattn_trainer.config import TrainConfig
from synattn_trainer.data import make_batch
from synattn_trainer.presets import VARIANTS, merge
from synattn_trainer.train import Trainer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu  # noqa: E402  bench/gpu/gpu.py: the shapes
import variants as bench_variants  # noqa: E402  bench/training/variants.py: the timed batches


def build_ms(cfg: TrainConfig, max_tokens: int, batches: int) -> tuple[float, int]:
    """Median milliseconds to build one of the first ``batches`` training batches, and the
    sentences in the first."""
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as out:
        trainer = Trainer(cfg, out, device=torch.device("cpu"), progress=False)
        groups = bench_variants.timed_batches(trainer, max_tokens, batches)
        times = []
        for index in groups:
            start = time.perf_counter()
            make_batch(trainer.train_data, index, trainer.requests)
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times), len(groups[0])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--variants", nargs="*", default=["vanilla", "dea", "lpea", "slr-pure", "slr-gated"]
    )
    ap.add_argument("--shards", type=Path, default=REPO / "build" / "m30k")
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--shape", choices=sorted(gpu.SHAPES), default="base")
    args = ap.parse_args()
    base = gpu.shards_base(args.variants, args.shards, args.shape)
    torch.set_num_threads(1)
    names = ["vanilla", *[n for n in args.variants if n != "vanilla"]]
    results = {}
    for name in names:
        cfg = TrainConfig.model_validate(merge(base, VARIANTS[name]))
        results[name] = build_ms(cfg, args.max_tokens, args.batches)
    vanilla = results["vanilla"][0]
    print(f"batch building, ~{args.max_tokens} target tokens per batch, 1 thread, median of "
          f"{args.batches} batches")  # fmt: skip
    print(f"{'variant':<16} {'ms':>8} {'x vanilla':>10} {'sentences':>10}")
    for name, (ms, sentences) in results.items():
        print(f"{name:<16} {ms:8.1f} {ms / vanilla:10.1f} {sentences:>10}")


if __name__ == "__main__":
    main()
