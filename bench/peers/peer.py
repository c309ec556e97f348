"""synattn against fairseq, the toolkit a researcher would otherwise pick, on the same work.

Both toolkits get the same Multi30k En->De subset (the first ``--pairs`` training pairs, parsed
by synattn; the 1,014 validation pairs), the same joint BPE (synattn's tokenizer; fairseq reads
its ids as words through ``fairseq-preprocess``), the same shape (3+3 layers, d=128, FFN 512,
8 heads, shared embeddings, post-norm, dropout 0.1, attention dropout 0.1), Adam (0.9, 0.98),
inverse-sqrt warm-up, label smoothing 0.1, fp32, and the same batches: lists of sentence
indices under a padded ~2,048-token budget, made by synattn's ``token_batches`` and collated by
each toolkit's own code inside its timed loop. Each measurement is a fresh process; the two
toolkits alternate (which goes first alternates too), and medians are printed.

1. Training speed: target tokens/s of whole updates (batch, forward, loss, backward, Adam,
   schedule) at 1 and at 2 threads. synattn runs ``Trainer.step``; fairseq runs
   ``fairseq.trainer.Trainer.train_step``, what ``fairseq-train`` runs per update.
2. Quality at equal budget: both train ``--train-updates`` updates on the same batch sequence
   (per seed in ``--seeds``, default 1: each toolkit's own initialisation and the batch order;
   BLEU per seed and, for several, mean and standard deviation), then beam 5 (length penalty
   1.0, max length 1.0 x source + 50) decodes the validation set, in batches of
   ``--decode-batch`` sentences as each toolkit's translate command makes them
   (fairseq-generate sorts by length; so does synattn). Decoding sentences/s at 1 and 2
   threads (the first seed's models), and BLEU (sacreBLEU, detokenised by the same tokenizer).

fairseq (``fairseq-fixed``, 0.12.3.1, a maintained build of fairseq 0.12) is installed into
``.cache/peer/venv`` with this environment's torch version pinned, so a CPU machine never pulls
a CUDA build; ``bench/peers/peer_fairseq.py`` is its side.

    python bench/peers/peer.py [--pairs 6000] [--vocab 4000] [--repeats 3] [--train-updates 1200]
                         [--seeds 1 2 3]
                         [--threads 1 2] [--device cpu] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from itertools import count
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "peer"
FAIRSEQ = "fairseq-fixed==0.12.3.1"
# fairseq's run-time needs, minus torchaudio (speech only; it would pull another torch build)
FAIRSEQ_DEPS = [
    "cffi", "cython", "hydra-core==1.3.2", "omegaconf==2.3.0", "numpy<2", "regex",
    "sacrebleu>=2", "tqdm", "bitarray", "scikit-learn", "packaging", "setuptools", "wheel",
]  # fmt: skip
MODEL = {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8,
         "dropout": 0.1, "attn_dropout": 0.1, "relu_dropout": 0.0}  # fmt: skip
OPTIM = {"lr": 0.002, "warmup": 400, "betas": [0.9, 0.98], "eps": 1e-9, "label_smoothing": 0.1}


# ------------------------------------------------------------------ fairseq's environment
def torch_pin() -> str:
    """This environment's torch release (``2.13.0+cpu`` -> ``torch==2.13.0``)."""
    import torch

    return "torch==" + torch.__version__.split("+")[0]


def peer_python(venv: Path) -> Path:
    """fairseq's interpreter, installed on first use."""
    py = venv / "bin" / "python"
    if (venv / ".installed").is_file():
        return py
    print(f"installing {FAIRSEQ} into {venv} (once; compiles fairseq's extensions, ~10 min)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pin = venv / "constraints.txt"
    pin.write_text(torch_pin() + "\n")
    pip = [str(py), "-m", "pip", "install", "-q", "-c", str(pin)]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, torch_pin()], check=True)
    subprocess.run([*pip, *FAIRSEQ_DEPS], check=True)
    # no build isolation: fairseq builds against the pinned torch, not a fresh download
    subprocess.run([*pip, "--no-deps", "--no-build-isolation", FAIRSEQ], check=True)
    (venv / ".installed").write_text(FAIRSEQ + "\n")
    return py


# ------------------------------------------------------------------ data
def prepare(data_dir: Path, pairs: int, vocab: int, py: Path) -> dict[str, Any]:
    """Parsed shards, the joint BPE, and fairseq's binarised copy of the same ids."""
    from synattn_parser.batch import parse_corpus
    from synattn_shared.datasets import MULTI30K, fetch
    from synattn_trainer.data import load_corpus
    from synattn_trainer.tokenizer import load_tokenizer

    root = CACHE / f"m30k-{pairs}-bpe{vocab}"
    root.mkdir(parents=True, exist_ok=True)
    raw = {n: fetch(MULTI30K[n], data_dir, "multi30k")
           for n in ("train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz")}  # fmt: skip
    parse_corpus(raw["train.en.gz"], root / "train", tgt=raw["train.de.gz"], limit=pairs,
                 workers=2, rows_per_shard=2000)  # fmt: skip
    parse_corpus(raw["val.en.gz"], root / "valid", tgt=raw["val.de.gz"])
    tok_path = root / "tokenizer.json"
    if not tok_path.is_file():
        subprocess.run(
            [str(Path(sys.executable).with_name("synattn")), "tokenizer", "train",
             "--data", str(root / "train"), "--data", str(root / "valid"),
             "--out", str(tok_path), "--vocab-size", str(vocab)],
            check=True,
        )  # fmt: skip
    tok = load_tokenizer(tok_path)
    bin_dir = root / "fairseq-bin"
    if not (bin_dir / ".done").is_file():
        text = root / "fairseq-text"
        text.mkdir(exist_ok=True)
        for split in ("train", "valid"):
            c = load_corpus(root / split, tok, max_len=None)
            # fairseq appends </s> to both sides and starts the decoder with </s>: write the
            # ids between synattn's <s> and </s>, as words
            src = [" ".join(map(str, s[:-1].tolist())) for s in c.src]
            tgt = [" ".join(map(str, t[1:-1].tolist())) for t in c.tgt]
            (text / f"{split}.en").write_text("\n".join(src) + "\n")
            (text / f"{split}.de").write_text("\n".join(tgt) + "\n")
        # one dictionary: synattn's ids 4.. in order, so fairseq's index i is synattn's id i
        (text / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(4, tok.get_vocab_size())))
        if bin_dir.exists():
            shutil.rmtree(bin_dir)
        subprocess.run(
            [str(py), "-m", "fairseq_cli.preprocess", "-s", "en", "-t", "de",
             "--trainpref", str(text / "train"), "--validpref", str(text / "valid"),
             "--srcdict", str(text / "dict.txt"), "--tgtdict", str(text / "dict.txt"),
             "--destdir", str(bin_dir), "--workers", "2"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        (bin_dir / ".done").write_text("")
    return {"root": root, "tokenizer": tok_path, "bin": bin_dir}


@functools.cache
def _train_corpus(root: Path, tokenizer: Path) -> Any:
    from synattn_trainer.data import load_corpus
    from synattn_trainer.tokenizer import load_tokenizer

    return load_corpus(root / "train", load_tokenizer(tokenizer))


def train_corpus(data: dict[str, Any]) -> Any:
    """The encoded training split (loaded once per run: batches and padding figures share it)."""
    return _train_corpus(data["root"], data["tokenizer"])


def batches_for(data: dict[str, Any], max_tokens: int, seed: int, n: int) -> list[list[int]]:
    """The first ``n`` training batches in synattn's order (epochs continue the sequence)."""
    from synattn_trainer.data import token_batches

    c = train_corpus(data)
    src, tgt = [len(s) for s in c.src], [len(t) - 1 for t in c.tgt]
    out: list[list[int]] = []
    for epoch in count():
        out.extend(token_batches(src, tgt, max_tokens, seed, epoch))
        if len(out) >= n:
            return out[:n]
    raise AssertionError


def padding_stats(data: dict[str, Any], batches: list[list[int]]) -> dict[str, float]:
    """Mean target tokens per batch, with and without padding (both toolkits pad alike)."""

    c = train_corpus(data)
    real = [sum(len(c.tgt[i]) - 1 for i in b) for b in batches]
    padded = [len(b) * max(len(c.tgt[i]) - 1 for i in b) for b in batches]
    src_real = [sum(len(c.src[i]) for i in b) for b in batches]
    src_padded = [len(b) * max(len(c.src[i]) for i in b) for b in batches]
    return {
        "sentences": statistics.mean(len(b) for b in batches),
        "tgt_tokens": statistics.mean(real),
        "tgt_padded": statistics.mean(padded),
        "src_tokens": statistics.mean(src_real),
        "src_padded": statistics.mean(src_padded),
    }


# ------------------------------------------------------------------ synattn's side
def synattn_config(job: dict[str, Any]) -> Any:
    from synattn_trainer.config import TrainConfig

    return TrainConfig.model_validate(
        {
            "name": "peer",
            "data": {
                "train": job["train"],
                "valid": job["valid"],
                "tokenizer": job["tokenizer"],
                "max_tokens": job["max_tokens"],
                "max_len": 1024,
            },
            "model": MODEL,
            "optim": {k: v for k, v in job["optim"].items()},
            "train": {
                "seed": job["seed"],
                "compile": job.get("compile", False),
                "precision": "fp32",
                "patience": 0,
                "bleu_every": 0,
                "max_updates": max(1, len(job["batches"])),
                "checkpoint_select": "last",  # the final weights, as fairseq's side is scored
            },
            "decode": {
                "beam": job["beam"],
                "lenpen": job["lenpen"],
                "max_len_a": job["max_len_a"],
                "max_len_b": job["max_len_b"],
                "batch_sentences": job["decode_batch"],
            },
        }
    )


def synattn_worker(mode: str, job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from synattn_trainer.decode import translate_corpus
    from synattn_trainer.model import Transformer
    from synattn_trainer.train import Trainer

    torch.set_num_threads(job["threads"])
    device = torch.device(job["device"])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cfg = synattn_config(job)
    trainer = Trainer(cfg, Path(job["work"]), device=device, progress=False)
    if mode == "speed":
        warm, timed = job["batches"][: job["warmup"]], job["batches"][job["warmup"] :]
        for b in warm:
            trainer.step([b])
        sync()
        t = time.perf_counter()
        tokens = sum(trainer.step([b]).tokens for b in timed)
        sync()
        took = time.perf_counter() - t
        return {"tokens": tokens, "seconds": took, "tokens_per_s": tokens / took}
    if mode == "train":
        t = time.perf_counter()
        tokens = sum(trainer.step([b]).tokens for b in job["batches"])
        sync()
        took = time.perf_counter() - t
        torch.save(trainer.model.state_dict(), job["model_file"])
        return {"train_tokens": tokens, "train_seconds": took}
    # decode: the trained weights, synattn's one translate loop
    model = Transformer(cfg, trainer.tok.get_vocab_size()).to(device)
    model.load_state_dict(torch.load(job["model_file"], map_location=device))
    data = trainer.valid_data
    translate_corpus(model, data, trainer.tok, cfg.decode, limit=64, device=device)  # warm-up
    sync()
    t = time.perf_counter()
    hyps = translate_corpus(model, data, trainer.tok, cfg.decode, device=device)
    sync()
    return {"decode_seconds": time.perf_counter() - t, "sentences": len(hyps), "text": hyps}


# ------------------------------------------------------------------ the run
def run_job(tool: str, mode: str, job: dict[str, Any], py: Path) -> dict[str, Any]:
    """One measurement in a fresh process with ``threads`` threads; its JSON result."""
    work = Path(job["work"])
    work.mkdir(parents=True, exist_ok=True)
    job_file, out = work / f"{tool}-{mode}.job.json", work / f"{tool}-{mode}.out.json"
    job_file.write_text(json.dumps(job))
    out.unlink(missing_ok=True)
    n = str(job["threads"])
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "CUDA_VISIBLE_DEVICES":
           os.environ.get("CUDA_VISIBLE_DEVICES", "0")}  # fmt: skip
    if tool == "fairseq":
        cmd = [str(py), str(REPO / "bench" / "peers" / "peer_fairseq.py"), mode]
    else:
        cmd = [sys.executable, __file__, "--worker", mode]
    subprocess.run([*cmd, "--job", str(job_file), "--out", str(out)], check=True, env=env,
                   cwd=work)  # fmt: skip
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=6000)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5, help="untimed updates per measurement")
    ap.add_argument("--timed", type=int, default=25, help="timed updates per measurement")
    ap.add_argument("--train-updates", type=int, default=1200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1],
                    help="equal-budget part: train both toolkits once per seed")  # fmt: skip
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--decode-batch", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-speed", action="store_true", help="only the equal-budget part")
    ap.add_argument("--compile", action="store_true", help="synattn with train.compile: true")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--venv", type=Path, default=CACHE / "venv")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        job = json.loads(args.job.read_text())
        args.out.write_text(json.dumps(synattn_worker(args.worker, job)))
        return

    import torch

    py = peer_python(args.venv)
    data = prepare(args.data_dir, args.pairs, args.vocab, py)
    seed = 1
    base = {
        "train": str(data["root"] / "train"), "valid": str(data["root"] / "valid"),
        "tokenizer": str(data["tokenizer"]), "data_bin": str(data["bin"]),
        "max_tokens": args.max_tokens, "seed": seed, "model": MODEL, "optim": OPTIM,
        "device": args.device, "warmup": args.warmup, "beam": 5, "lenpen": 1.0,
        "max_len_a": 1.0, "max_len_b": 50, "decode_batch": args.decode_batch,
        "compile": args.compile,
    }  # fmt: skip
    fs_versions = json.loads(
        subprocess.run(
            [str(py), str(REPO / "bench" / "peers" / "peer_fairseq.py"), "versions"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    hw = f"{os.cpu_count()} CPU cores" if args.device == "cpu" else torch.cuda.get_device_name()
    print(f"synattn (torch {torch.__version__}) vs {FAIRSEQ} (torch {fs_versions['torch']}); "
          f"{hw}; Multi30k En-De first {args.pairs} pairs, joint BPE {args.vocab}")  # fmt: skip

    # 1. training speed
    if not args.skip_speed:
        training_speed(args, data, base, py)
    if args.skip_quality:
        return

    # 2. same budget, then decoding speed and BLEU
    equal_budget(args, data, base, py)


def training_speed(
    args: argparse.Namespace, data: dict[str, Any], base: dict[str, Any], py: Path
) -> None:
    """Part 1: training target tokens/s of both toolkits on the same batches."""
    seed = base["seed"]
    speed_batches = batches_for(data, args.max_tokens, seed, args.warmup + args.timed)
    pad = padding_stats(data, speed_batches[args.warmup :])
    print(
        f"batches: {pad['sentences']:.1f} sentences, {pad['tgt_tokens']:.0f} target tokens "
        f"({pad['tgt_padded']:.0f} with padding), {pad['src_tokens']:.0f} source tokens "
        f"({pad['src_padded']:.0f} with padding) per batch, identical for both toolkits"
    )
    speeds: dict[tuple[str, int], list[float]] = {}
    for r in range(args.repeats):
        for threads in args.threads:
            order = ["synattn", "fairseq"] if r % 2 == 0 else ["fairseq", "synattn"]
            for tool in order:
                job = {**base, "threads": threads, "batches": speed_batches,
                       "work": str(CACHE / "work" / f"speed-{tool}-{threads}")}  # fmt: skip
                res = run_job(tool, "speed", job, py)
                speeds.setdefault((tool, threads), []).append(res["tokens_per_s"])
                print(f"  repeat {r + 1} {tool:8} {threads} thread(s): "
                      f"{res['tokens_per_s']:7.0f} target tokens/s", flush=True)  # fmt: skip
    print("training, target tokens/s (median of alternating repeats):")
    for threads in args.threads:
        s = statistics.median(speeds[("synattn", threads)])
        f = statistics.median(speeds[("fairseq", threads)])
        print(f"  {threads} thread(s): synattn {s:7.0f}  fairseq {f:7.0f}  "
              f"ratio {s / f:.2f} (goal >= 1.25)")  # fmt: skip


def equal_budget(
    args: argparse.Namespace, data: dict[str, Any], base: dict[str, Any], py: Path
) -> None:
    """Part 2: both train the same updates on the same batches; decoding speed and BLEU."""
    from synattn_trainer.evaluate import corpus_bleu
    from synattn_trainer.tokenizer import decode, load_tokenizer

    threads = max(args.threads)
    trained: dict[tuple[str, int], dict[str, Any]] = {}
    for seed in args.seeds:  # each seed: both toolkits' initialisation and the batch order
        train_batches = batches_for(data, args.max_tokens, seed, args.train_updates)
        for tool in ("synattn", "fairseq"):
            work = CACHE / "work" / f"u{args.train_updates}-s{seed}-{tool}"
            job = {**base, "seed": seed, "threads": threads, "batches": train_batches,
                   "work": str(work), "model_file": str(work / "model.pt")}  # fmt: skip
            if (work / "trained.json").is_file():
                trained[tool, seed] = json.loads((work / "trained.json").read_text())
            else:
                trained[tool, seed] = {**run_job(tool, "train", job, py), "job": job}
                (work / "trained.json").write_text(json.dumps(trained[tool, seed]))
            t = trained[tool, seed]
            print(f"  seed {seed} {tool:8} trained {args.train_updates} updates in "
                  f"{t['train_seconds']:.0f} s ({t['train_tokens'] / t['train_seconds']:.0f} "
                  f"target tokens/s, {threads} threads)", flush=True)  # fmt: skip
    tok = load_tokenizer(data["tokenizer"])
    from synattn_trainer.data import load_corpus

    refs = load_corpus(data["root"] / "valid", tok).refs

    def text_of(tool: str, res: dict[str, Any]) -> list[str]:
        return res["text"] if tool == "synattn" else decode(tok, res["hypotheses"])

    first = args.seeds[0]  # decoding speed: the first seed's models
    dec: dict[tuple[str, int], list[float]] = {}
    texts: dict[tuple[str, int], list[str]] = {}
    for r in range(args.repeats):
        for threads in args.threads:
            order = ["synattn", "fairseq"] if r % 2 == 0 else ["fairseq", "synattn"]
            for tool in order:
                job = {**trained[tool, first]["job"], "threads": threads}
                res = run_job(tool, "decode", job, py)
                rate = res["sentences"] / res["decode_seconds"]
                dec.setdefault((tool, threads), []).append(rate)
                texts[tool, first] = text_of(tool, res)
                print(f"  repeat {r + 1} {tool:8} {threads} thread(s): {rate:6.1f} sentences/s",
                      flush=True)  # fmt: skip
    for seed in args.seeds[1:]:
        for tool in ("synattn", "fairseq"):
            res = run_job(tool, "decode", {**trained[tool, seed]["job"], "threads": threads}, py)
            texts[tool, seed] = text_of(tool, res)
    print(f"beam-5 decoding of {len(refs)} validation sentences (median of repeats):")
    for threads in args.threads:
        s = statistics.median(dec[("synattn", threads)])
        f = statistics.median(dec[("fairseq", threads)])
        print(f"  {threads} thread(s): synattn {s:6.1f}  fairseq {f:6.1f} sentences/s  "
              f"ratio {s / f:.2f} (goal >= 1.5)")  # fmt: skip
    bleu = {key: corpus_bleu(text, refs) for key, text in texts.items()}
    scores: dict[str, list[float]] = {"synattn": [], "fairseq": []}
    for seed in args.seeds:
        for tool in scores:
            scores[tool].append(bleu[tool, seed].score)
        d = bleu["synattn", seed].score - bleu["fairseq", seed].score
        print(f"BLEU after {args.train_updates} updates, seed {seed}: synattn "
              f"{bleu['synattn', seed].score:.2f}  fairseq {bleu['fairseq', seed].score:.2f}  "
              f"difference {d:+.2f}")  # fmt: skip
    if len(args.seeds) > 1:
        mean = {tool: statistics.mean(xs) for tool, xs in scores.items()}
        sd = {tool: statistics.stdev(xs) for tool, xs in scores.items()}
        print(f"BLEU over seeds {args.seeds}: synattn {mean['synattn']:.2f} (sd "
              f"{sd['synattn']:.2f})  fairseq {mean['fairseq']:.2f} (sd {sd['fairseq']:.2f})  "
              f"difference of means {mean['synattn'] - mean['fairseq']:+.2f} "
              "(goal: within 0.5)")  # fmt: skip
    else:
        print("(goal: BLEU within 0.5; --seeds 1 2 3 compares means over seeds)")
    print(f"signature: {bleu['synattn', first].signature}")


if __name__ == "__main__":
    main()
