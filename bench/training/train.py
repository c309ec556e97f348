"""Training speed of the synattn Transformer against a stock ``torch.nn.Transformer`` of the same
size on the same batches, measured in the same run; then a fixed-budget training of the small
config on full Multi30k En->De with test2016 BLEU (sacreBLEU signature).

Speed: the small config (3+3 layers, d=256, 8 heads, d_ff=1024, post-norm, tied embeddings,
dropout 0.1) on real Multi30k batches (~4,096 target tokens); each timed update is forward,
label-smoothed loss, backward and an Adam step. Both models get the same token embedding,
sinusoidal positions, padding masks and output projection; they differ only in the encoder-
decoder stack. Interleaved repeats; medians. Goal: ratio >= 1.0.

    python bench/training/train.py [--updates 10] [--repeats 3] [--train-updates 400] \
        [--data-dir ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from synattn_trainer.config import TrainConfig
from synattn_trainer.data import load_corpus, make_batch, token_batches
from synattn_trainer.evaluate import corpus_bleu
from synattn_trainer.loading import load_model
from synattn_trainer.model import Transformer, count_parameters, sinusoids
from synattn_trainer.tokenizer import load_tokenizer
from synattn_trainer.train import Trainer, token_loss

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import CACHE, prepare

REPO = Path(__file__).resolve().parents[2]
SMALL = {"enc_layers": 3, "dec_layers": 3, "d_model": 256, "d_ff": 1024, "heads": 8}


class StockTransformer(nn.Module):
    """``torch.nn.Transformer`` with the same embedding, positions and tied output as ours."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, d_ff: int, p: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        nn.init.normal_(self.embed.weight, 0.0, d**-0.5)
        self.register_buffer("pe", sinusoids(1024, d), persistent=False)
        self.core = nn.Transformer(d, heads, layers, layers, d_ff, p, batch_first=True)
        self.drop = nn.Dropout(p)
        self.scale = math.sqrt(d)

    def _in(self, ids: Tensor) -> Tensor:
        return self.drop(self.embed(ids) * self.scale + self.pe[: ids.shape[1]])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=torch.bool)
        h = self.core(
            self._in(src), self._in(tgt), tgt_mask=causal, src_key_padding_mask=src == 0,
            tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0, tgt_is_causal=True,
        )  # fmt: skip
        return h @ self.embed.weight.t()


def speed(model: nn.Module, corpus, batches: list[list[int]], warmup: int, ours: bool) -> float:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    tokens, start = 0, 0.0
    for step, index in enumerate(batches):
        if step == warmup:
            start, tokens = time.perf_counter(), 0
        b = make_batch(corpus, index)
        logits = model(b.src, b.tgt_in, b.syntax) if ours else model(b.src, b.tgt_in)
        loss, _ = token_loss(logits, b.tgt_out, 0.1)
        (loss / b.ntokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += b.ntokens
    return tokens / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--updates", type=int, default=10, help="timed updates per repeat")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--train-updates", type=int, default=400, help="0: speed only")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    data = prepare(args.data_dir)
    tok = load_tokenizer(data["tokenizer"])
    corpus = load_corpus(data["train"], tok, max_len=128)
    order = token_batches(
        [len(s) for s in corpus.src], [len(t) - 1 for t in corpus.tgt], args.max_tokens, 1, 0
    )
    batches = order[: args.warmup + args.updates]
    cfg = TrainConfig.model_validate({
        "data": {"train": str(data["train"]), "valid": str(data["valid"]),
                 "test": str(data["test"]), "tokenizer": str(data["tokenizer"]),
                 "max_tokens": args.max_tokens},
        "model": {**SMALL, "dropout": 0.1, "attn_dropout": 0.1},
        "optim": {"lr": 1e-3, "warmup": 400},
        "train": {"max_updates": args.train_updates or 1, "seed": args.seed, "patience": 0,
                  "checkpoint_every_updates": max(1, (args.train_updates or 1) // 20),
                  "average_last": 5 if (args.train_updates or 1) >= 20 else 1,
                  "bleu_every": 0, "log_every": 100},
        "decode": {"beam": 5, "lenpen": 1.0, "batch_sentences": 100},
    })  # fmt: skip
    vocab = tok.get_vocab_size()
    ours = Transformer(cfg, vocab)
    stock = StockTransformer(vocab, 256, 8, 3, 1024, 0.1)
    rates: dict[str, list[float]] = {"synattn": [], "torch.nn.Transformer": []}
    for _ in range(args.repeats):
        rates["synattn"].append(speed(ours, corpus, batches, args.warmup, True))
        rates["torch.nn.Transformer"].append(speed(stock, corpus, batches, args.warmup, False))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu (cuda "
        f"available: {dev == 'cuda'}); small config, {args.updates} timed updates of "
        f"~{args.max_tokens} tokens, median of {args.repeats}"
    )
    base = statistics.median(rates["torch.nn.Transformer"])
    for name, model in (("synattn", ours), ("torch.nn.Transformer", stock)):
        med = statistics.median(rates[name])
        print(
            f"{name:<22} {med:8.0f} target tok/s  x stock {med / base:5.2f}  "
            f"params {count_parameters(model):,}"
        )
    if not args.train_updates:
        return
    run = CACHE / "runs" / f"train-small-u{args.train_updates}-t{args.max_tokens}-s{args.seed}"
    t0 = time.perf_counter()
    trainer = Trainer(cfg, run, progress=False)
    result = trainer.train()
    minutes = (time.perf_counter() - t0) / 60
    model, _ = load_model(result.averaged or result.checkpoint)  # type: ignore[arg-type]
    trainer.model.load_state_dict(model.state_dict())
    test = load_corpus(data["test"], trainer.tok, source_eos=trainer.cfg.data.source_eos)
    hyps = trainer.translate(test)
    (run / "test.de").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    bleu = corpus_bleu(hyps, test.refs)
    print(
        f"small config on full Multi30k: {result.update} updates x ~{args.max_tokens} tokens "
        f"(epoch {result.epoch}), {minutes:.1f} min of training (resumed runs count only "
        f"this process); test2016 BLEU {bleu.score:.2f} (beam 5, averaged last 5)"
    )
    print(f"signature: {bleu.signature}")


if __name__ == "__main__":
    main()
