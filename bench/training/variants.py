"""Training speed of every attention variant relative to vanilla, measured in the same run.

A small model (3+3 layers, d=128, 8 heads, m30k-tiny8's shape) trains on real Multi30k batches
(~2,000 target tokens each, parsed once and cached under .cache/bench/variants); for each
variant: warm-up updates, then timed updates of the trainer's own ``Trainer.step`` (building the
batch's syntax tensors, HeadMask gates, forward, backward, Adam and the schedule). Prints target
tokens/s, the median over repeats, and the ratio to vanilla (goal for bias/mask variants: 0.85).

    python bench/training/variants.py [--variants dea lpea ...] [--updates 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from synattn_shared.datasets import link_multi30k
from synattn_shared.shards import ShardDataset
from synattn_trainer.config import TrainConfig
from synattn_trainer.data import Batch, token_batches
from synattn_trainer.prefetch import BatchPrefetcher
from synattn_trainer.presets import VARIANTS, merge
from synattn_trainer.tokenizer import train_tokenizer
from synattn_trainer.train import Trainer

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench" / "variants"

KIND = {  # what the variant adds to the logits: the 0.85 goal is for bias/mask variants
    "dea": "mask", "lpea": "bias", "slr-pure": "bias", "localness": "bias", "8L": "no source </s>",
    "headmask-impt": "one extra forward+backward", "headmask-random": "gates",
    "1L": "one encoder head (d_h = d), fused SDPA",
}  # fmt: skip


def prepare(data_dir: Path, pairs: int, vocab: int = 4000) -> Path:
    """Parse ``pairs`` Multi30k training pairs once and learn a joint vocabulary (cached, as
    ``tokenizer_path(pairs, vocab)``)."""
    # imported here: a machine that reuses parsed shards (a lent GPU) needs no parser
    from synattn_parser.batch import parse_corpus

    CACHE.mkdir(parents=True, exist_ok=True)
    raw = CACHE / "raw"
    link_multi30k(data_dir, raw)
    out = CACHE / f"train{pairs}"
    parse_corpus(
        raw / "train.en.gz", out, tgt=raw / "train.de.gz", limit=pairs, rows_per_shard=5000
    )
    tok_path = tokenizer_path(pairs, vocab)
    if not tok_path.is_file():
        texts = []
        for row in ShardDataset(out).iter_rows(columns=["words", "tgt"]):
            texts += [" ".join(row["words"]), row["tgt"]]
        train_tokenizer(texts, vocab).save(str(tok_path))
    return out


def tokenizer_path(pairs: int, vocab: int = 4000) -> Path:
    """Where ``prepare`` keeps the vocabulary it learnt (the 4k one keeps its old name)."""
    return CACHE / (f"tok{pairs}.json" if vocab == 4000 else f"tok{pairs}-v{vocab}.json")


def timed_batches(trainer: Trainer, max_tokens: int, n: int) -> list[list[int]]:
    """``n`` training batches of the epoch-0 order, cycled when the data holds fewer."""
    data = trainer.train_data
    order = token_batches(
        [len(s) for s in data.src], [len(t) - 1 for t in data.tgt], max_tokens, 1, 0
    )
    return [order[k % len(order)] for k in range(n)]


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU), around a timed region."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def timed_items(
    trainer: Trainer, max_tokens: int, n: int, loader_workers: int = 0
) -> Iterator[Iterator[list[int] | Batch]]:
    """What ``Trainer.step`` takes for the ``n`` batches of ``timed_batches``: their indices
    (built inline by the step), or with ``loader_workers`` > 0 the batches built ahead in that
    many processes, as training does with ``Trainer(loader_workers=...)``."""
    groups = timed_batches(trainer, max_tokens, n)
    if not loader_workers:
        yield iter(groups)
        return
    with BatchPrefetcher(trainer.train_data, trainer.requests, loader_workers) as prefetcher:
        yield prefetcher.batches(groups)


def measure(
    cfg: TrainConfig,
    warmup: int,
    updates: int,
    max_tokens: int,
    device: torch.device | None = None,
    loader_workers: int = 0,
    trainer: Trainer | None = None,
) -> float:
    """Target tokens/s of ``Trainer.step`` (what training runs: batch building, HeadMask gates,
    forward, backward, clipping, Adam, schedule) over the same batches for every variant;
    ``loader_workers`` > 0 builds the batches ahead in that many processes (``timed_items``).
    ``trainer``: one built from ``cfg`` to go on with (a compiled forward is compiled once, not
    at every measurement); by default a fresh one."""
    torch.manual_seed(0)
    with contextlib.ExitStack() as stack:
        if trainer is None:
            out = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-variants-"))
            trainer = Trainer(cfg, out, device=device, progress=False)
        with timed_items(trainer, max_tokens, warmup + updates, loader_workers) as items:
            tokens = 0
            start = 0.0
            for step, item in enumerate(items):
                if step == warmup:
                    sync(trainer.device)
                    start = time.perf_counter()
                    tokens = 0
                tokens += trainer.step([item]).tokens
            sync(trainer.device)
            return tokens / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    shards = prepare(args.data_dir, args.pairs)
    base = {
        "data": {"train": str(shards), "valid": str(shards), "max_len": 128,
                 "tokenizer": str(tokenizer_path(args.pairs))},
        "model": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8},
        "optim": {"lr": 1e-4, "warmup": 4000},
    }  # fmt: skip
    names = ["vanilla", *[v for v in args.variants if v != "vanilla"]]
    rates: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
        for name in names:
            cfg = TrainConfig.model_validate(merge(base, VARIANTS[name]))
            rates[name].append(measure(cfg, args.warmup, args.updates, args.max_tokens))
    vanilla = statistics.median(rates["vanilla"])
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu; "
        f"{args.updates} timed updates of ~{args.max_tokens} tokens, median of {args.repeats}"
    )
    width = max(12, *map(len, names))
    print(f"{'variant':<{width}} {'tokens/s':>9} {'x vanilla':>9}  kind")
    for name in names:
        med = statistics.median(rates[name])
        kind = KIND.get(name, "" if name == "vanilla" else "explicit attention")
        print(f"{name:<{width}} {med:9.0f} {med / vanilla:9.2f}  {kind}")


if __name__ == "__main__":
    main()
