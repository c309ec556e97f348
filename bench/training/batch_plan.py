"""The epoch's batch plan at millions of pairs: ``batch_plan`` against the code it replaced.

The plan is built at every epoch's start and every resume, in every rank. The earlier code
sorted with a three-key ``np.lexsort`` and cut batches in a Python loop over every pair (3.1 s
at 4.5M pairs here); ``batch_plan`` now sorts the pairs of lengths by radix, orders ties within
each group, and cuts a run of equal widths at a time. Both are timed here on the same lengths,
alternating, and must give the same plan.

    python bench/training/batch_plan.py                                  # 4.5M synthetic pairs
    python bench/training/batch_plan.py --data build/scale/m30k-4500000  # a corpus's own lengths
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from synattn_trainer.data import batch_plan


def reference_plan(
    src: np.ndarray, tgt: np.ndarray, max_tokens: int, seed: int, epoch: int
) -> tuple[np.ndarray, list[int]]:
    """The earlier ``batch_plan``'s order and batch starts, verbatim."""
    n = len(src)
    rng = np.random.default_rng([seed, epoch])
    order = np.lexsort((rng.random(n), tgt, src)).astype(np.int32)
    widths = np.maximum(src, tgt)[order]
    starts: list[int] = [0] if n else []
    count = longest = 0
    step = 1 << 16
    for base in range(0, n, step):
        for pos, w in enumerate(widths[base : base + step].tolist(), base):
            width = longest if longest > w else w
            if count and width * (count + 1) > max_tokens:
                starts.append(pos)
                count, width = 0, w
            count += 1
            longest = width
    return order, starts


def lengths(data: Path | None, pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths: a corpus's own (as the trainer batches them), or ``pairs``
    synthetic ones shaped like Multi30k's (5-45 subwords, targets a little longer)."""
    if data is not None:
        from synattn_trainer.data import load_corpus
        from synattn_trainer.tokenizer import load_tokenizer

        tok = load_tokenizer(data.parent.parent / "m30k" / "tokenizer.json")
        corpus = load_corpus(data, tok)
        return corpus.src_lens(), corpus.tgt_lens() - 1
    rng = np.random.default_rng(0)
    src = rng.integers(5, 45, pairs).astype(np.int32)
    tgt = np.clip(src + rng.integers(-3, 8, pairs), 2, None).astype(np.int32)
    return src, tgt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path,
                   help="a parsed corpus with its cache (bench/scale/scale.py)")  # fmt: skip
    p.add_argument("--pairs", type=int, default=4_500_000)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    src, tgt = lengths(args.data, args.pairs)
    new: list[float] = []
    old: list[float] = []
    for epoch in range(args.repeat):
        t = time.perf_counter()
        plan = batch_plan(src, tgt, args.max_tokens, seed=1, epoch=epoch)
        new.append(time.perf_counter() - t)
        t = time.perf_counter()
        order, starts = reference_plan(src, tgt, args.max_tokens, seed=1, epoch=epoch)
        old.append(time.perf_counter() - t)
        if not (np.array_equal(plan.order, order) and plan.bounds[:-1].tolist() == starts):
            raise SystemExit(f"epoch {epoch}: the plans differ")
    a, b = statistics.median(old), statistics.median(new)
    print(f"{len(src):,} pairs, {len(plan):,} batches, median of {args.repeat} (the same plans):")
    print(f"  earlier code {a:.2f} s, batch_plan {b:.2f} s: {a / b:.2f}x faster")


if __name__ == "__main__":
    main()
