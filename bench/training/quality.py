"""BLEU of attention variants against vanilla on Multi30k En->De, same budget and seed.

Parses Multi30k train/val/test2016 once (spaCy, cached under .cache/bench/quality), learns an
8k joint BPE vocabulary, trains vanilla and each named variant with the same configuration,
budget and seed (re-running resumes unfinished runs), translates test2016 with the averaged
checkpoint and prints cased detokenised sacreBLEU, lowercased BLEU, chrF and the paired-bootstrap
p-value against vanilla (sacreBLEU, 1000 resamples), with the budget.

    python bench/training/quality.py --variants vanilla dea lpea rhe+lpea slr-gated \
        [--updates 1000] [--model tiny8|small] [--seed 1] [--data-dir ../shared/data]

On a small CPU, several processes (``OMP_NUM_THREADS=1``, disjoint ``--variants``) may share the
runs: each run is locked while it trains, vanilla is trained where named and reused elsewhere, and
each process prints the table of its own variants (tok/s are then measured under contention).
"""

from __future__ import annotations

import argparse
import fcntl
import json
from pathlib import Path

import torch

from synattn_parser.batch import parse_corpus
from synattn_shared.datasets import link_multi30k
from synattn_shared.shards import ShardDataset
from synattn_trainer.config import TrainConfig
from synattn_trainer.data import load_corpus
from synattn_trainer.evaluate import corpus_bleu, corpus_chrf, paired_bootstrap
from synattn_trainer.loading import load_model
from synattn_trainer.model import count_parameters
from synattn_trainer.presets import VARIANTS, merge
from synattn_trainer.tokenizer import train_tokenizer
from synattn_trainer.train import Trainer

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench" / "quality"
MODELS = {
    "tiny8": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8},
    "small": {"enc_layers": 3, "dec_layers": 3, "d_model": 256, "d_ff": 1024, "heads": 8},
}


def prepare(data_dir: Path) -> dict[str, Path]:
    raw = CACHE / "raw"
    link_multi30k(data_dir, raw)
    out = {}
    for split, name in (("train", "train"), ("val", "valid"), ("test_2016_flickr", "test")):
        out[name] = CACHE / name
        parse_corpus(
            raw / f"{split}.en.gz", out[name], tgt=raw / f"{split}.de.gz", rows_per_shard=10_000
        )
    tok = CACHE / "tokenizer.json"
    if not tok.is_file():
        texts = []
        for name in ("train", "valid"):
            for row in ShardDataset(out[name]).iter_rows(columns=["words", "tgt"]):
                texts += [" ".join(row["words"]), row["tgt"]]
        train_tokenizer(texts, 8000).save(str(tok))
    out["tokenizer"] = tok
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--variants", nargs="+", default=["vanilla", "dea", "lpea", "rhe+lpea", "slr-gated"]
    )
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny8")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--dropout", type=float, default=0.1, help="0.3 for full-length runs")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=CACHE / "runs")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    # vanilla is the table's baseline: trained where named, else last (or reused when finished)
    names = list(dict.fromkeys(args.variants if "vanilla" in args.variants else
                               [*args.variants, "vanilla"]))  # fmt: skip
    data = prepare(args.data_dir)
    budget = (
        f"{args.model}, {args.updates} updates x ~{args.max_tokens} src tokens, seed {args.seed}"
    )
    results = {}
    for name in names:
        raw = {
                "name": name,
                "data": {
                    "train": str(data["train"]), "valid": str(data["valid"]),
                    "test": str(data["test"]), "tokenizer": str(data["tokenizer"]),
                    "max_tokens": args.max_tokens,
                },
                "model": {**MODELS[args.model], "dropout": args.dropout, "attn_dropout": 0.1},
                "optim": {"lr": args.lr, "warmup": args.warmup},
                "train": {
                    "max_updates": args.updates, "seed": args.seed, "patience": 0,
                    # the last 5 of checkpoints every 5% of the run: its final 20%
                    "checkpoint_every_updates": max(1, args.updates // 20),
                    "average_last": 5 if args.updates >= 20 else 1,
                    "bleu_every": 0, "log_every": 100,
                },
                "decode": {"beam": 5, "lenpen": 1.0, "batch_sentences": 100},
        }  # fmt: skip
        cfg = TrainConfig.model_validate(merge(raw, VARIANTS[name]))
        tag = (
            f"{args.model}-u{args.updates}-t{args.max_tokens}-lr{args.lr}"
            f"-d{args.dropout}-s{args.seed}"
        )
        run = args.out / tag / name
        run.mkdir(parents=True, exist_ok=True)
        with (run / ".lock").open("w") as lock:
            # several bench processes (one thread each) may share the runs: one trains a variant
            fcntl.flock(lock, fcntl.LOCK_EX)
            trainer = Trainer(cfg, run, progress=False)
            test = load_corpus(data["test"], trainer.tok, source_eos=trainer.cfg.data.source_eos)
            if (run / "test.de").is_file():  # finished earlier: reuse its translation
                hyps = (run / "test.de").read_text(encoding="utf-8").splitlines()
            else:
                result = trainer.train()
                model, _ = load_model(result.averaged or result.checkpoint)  # type: ignore[arg-type]
                trainer.model.load_state_dict(model.state_dict())
                hyps = trainer.translate(test)
                (run / "test.de").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        speeds = [
            json.loads(line)["tokens_per_s"]
            for line in (run / "metrics.jsonl").read_text().splitlines()
            if '"tokens_per_s"' in line
        ]
        results[name] = {
            "hyps": hyps, "refs": test.refs, "params": count_parameters(trainer.model),
            "tok_s": speeds[-1] if speeds else float("nan"),
        }  # fmt: skip
    refs = results["vanilla"]["refs"]
    w = max(len(n) for n in results)
    print(f"Multi30k test2016 En->De; budget: {budget}; device {torch.device('cpu')}")
    print(
        f"{'variant':<{w}} {'BLEU':>6} {'BLEU-lc':>7} {'chrF':>6} {'p vs vanilla':>12} "
        f"{'params':>9} {'tok/s':>7}"
    )
    for name in ["vanilla", *[n for n in names if n != "vanilla"]]:
        r = results[name]
        bleu = corpus_bleu(r["hyps"], refs)
        lc = corpus_bleu(r["hyps"], refs, lowercase=True)
        chrf = corpus_chrf(r["hyps"], refs)
        p = "-"
        if name != "vanilla":
            pb = paired_bootstrap(r["hyps"], results["vanilla"]["hyps"], refs, args.bootstrap)
            p = f"{pb.p_value:.4f}"
        print(
            f"{name:<{w}} {bleu.score:6.2f} {lc.score:7.2f} {chrf.score:6.2f} {p:>12} "
            f"{r['params']:9d} {r['tok_s']:7.0f}"
        )
    print(f"signature: {corpus_bleu(results['vanilla']['hyps'], refs).signature}")


if __name__ == "__main__":
    main()
