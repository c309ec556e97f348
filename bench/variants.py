"""Training speed of every attention variant relative to vanilla, measured in the same run.

A small model (3+3 layers, d=128, 8 heads, m30k-tiny8's shape) trains on real Multi30k batches
(~2,000 target tokens each, parsed once and cached under .cache/bench/variants); for each
variant: warm-up updates, then timed updates (forward, backward, Adam step, including building
the batch's syntax tensors). Prints target tokens/s, the median over repeats, and the ratio to
vanilla (goal for bias/mask variants: >= 0.85).

    python bench/variants.py [--variants dea lpea ...] [--updates 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from synattn_parser.batch import parse_corpus
from synattn_shared.datasets import link_multi30k
from synattn_shared.shards import ShardDataset
from synattn_trainer import headmask
from synattn_trainer.config import TrainConfig
from synattn_trainer.data import load_corpus, make_batch, token_batches
from synattn_trainer.model import Transformer
from synattn_trainer.presets import VARIANTS, merge
from synattn_trainer.tokenizer import load_tokenizer, train_tokenizer
from synattn_trainer.train import token_loss

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench" / "variants"

KIND = {  # what the variant adds to the logits: the 0.85 goal is for bias/mask variants
    "dea": "mask", "lpea": "bias", "slr-pure": "bias", "localness": "bias",
    "headmask-impt": "one extra forward+backward", "headmask-random": "gates",
    "1L": "one encoder head (d_h = d), fused SDPA",
}  # fmt: skip


def prepare(data_dir: Path, pairs: int) -> Path:
    """Parse ``pairs`` Multi30k training pairs once and learn a 4k vocabulary (cached)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    raw = CACHE / "raw"
    link_multi30k(data_dir, raw)
    out = CACHE / f"train{pairs}"
    parse_corpus(
        raw / "train.en.gz", out, tgt=raw / "train.de.gz", limit=pairs, rows_per_shard=5000
    )
    tok_path = CACHE / f"tok{pairs}.json"
    if not tok_path.is_file():
        texts = []
        for row in ShardDataset(out).iter_rows(columns=["words", "tgt"]):
            texts += [" ".join(row["words"]), row["tgt"]]
        train_tokenizer(texts, 4000).save(str(tok_path))
    return out


def headmask_gates(model: Transformer, cfg: TrainConfig, b, step: int):  # type: ignore[no-untyped-def]
    """The trainer's HeadMask gates for this batch (Impt-N costs an extra forward+backward)."""
    if cfg.headmask.mode == "none":
        return None
    n = max(1, round(0.125 * model.num_heads))
    if cfg.headmask.mode == "random":
        masked = headmask.random_heads(model.num_heads, n, 1, step, 0)
    else:
        imp = headmask.sentence_importance(
            model, b, lambda m, x: headmask.per_sentence_loss(m, x, 0.1)
        ).mean(0)
        masked = headmask.select_important(imp, n)
    return headmask.mask_gates(model.num_heads, masked, b.src.device)


def measure(cfg: TrainConfig, corpus, vocab: int, batches: list[list[int]], warmup: int) -> float:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = Transformer(cfg, vocab).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    feats, fopts = model.syntax_features(), model.feature_options()
    tokens = 0
    start = 0.0
    for step, index in enumerate(batches):
        if step == warmup:
            start = time.perf_counter()
            tokens = 0
        b = make_batch(corpus, index, feats, fopts)
        model.set_head_gates(headmask_gates(model, cfg, b, step))
        loss, _ = token_loss(model(b.src, b.tgt_in, b.syntax), b.tgt_out, 0.1)
        aux = model.aux_loss()
        ((loss if aux is None else loss + aux) / b.ntokens).backward()
        model.set_head_gates(None)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += b.ntokens
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
    tok = load_tokenizer(CACHE / f"tok{args.pairs}.json")
    corpus = load_corpus(shards, tok, max_len=128)
    order = token_batches(
        [len(s) for s in corpus.src], [len(t) - 1 for t in corpus.tgt], args.max_tokens, 1, 0
    )
    batches = order[: args.warmup + args.updates]
    base = {
        "data": {"train": str(shards), "valid": str(shards), "tokenizer": "unused"},
        "model": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8},
    }
    names = ["vanilla", *[v for v in args.variants if v != "vanilla"]]
    rates: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
        for name in names:
            cfg = TrainConfig.model_validate(merge(base, VARIANTS[name]))
            rates[name].append(measure(cfg, corpus, tok.get_vocab_size(), batches, args.warmup))
    vanilla = statistics.median(rates["vanilla"])
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu; "
        f"{args.updates} timed updates of ~{args.max_tokens} tokens, median of {args.repeats}"
    )
    print(f"{'variant':<12} {'tokens/s':>9} {'x vanilla':>9}  kind")
    for name in names:
        med = statistics.median(rates[name])
        kind = KIND.get(name, "" if name == "vanilla" else "explicit attention")
        print(f"{name:<12} {med:9.0f} {med / vanilla:9.2f}  {kind}")


if __name__ == "__main__":
    main()
