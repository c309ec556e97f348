"""The trainer at the papers' corpus sizes: memory, start-up and speed against pairs.

A stand-in for IWSLT'14 (160k pairs) to WMT'14 En-De (4.5M pairs): the parsed Multi30k train
shards replicated (hard links: no extra disk) to about 29k, 290k, 1M and 4.5M pairs, and a
variant with WMT-like sentence lengths (two Multi30k pairs joined into one, about 2x the
subwords per side; the joined parse has two roots). The text repeats, so nothing here says
anything about translation quality at scale; it measures what the corpus size costs the
trainer. For each corpus:

- cache build: the one-off encoding of the split into its memory-mapped cache (a fresh process);
- start to first update: from the training process's start (``fork``/``exec``) to its first
  logged update, with the cache present;
- private memory per process, sampled every 0.2 s over the run: USS (private clean + dirty),
  and its anonymous part, which the process allocated itself. The rest of USS is pages of
  the mapped cache that only this process has touched: page cache, reclaimable, and shared
  as soon as a second process (a DDP rank, a batch-building worker) maps the file;
- target tokens/s over the run's updates (the trainer's own logged rate at the last update).
  A larger corpus gives the length-bucketed batches less padding (more pairs of each length),
  so its natural batches carry more target tokens per update and its tokens/s rises for that
  reason alone. The one-process runs therefore train on the same batches at every size: the
  29k corpus's own batches (the 14.5k joined corpus's, for the WMT-like one), each row taken
  from a random copy of it across the whole replicated corpus, so the content of every update
  is identical and only where its rows lie in the file differs. The real epoch plan is still
  built at start-up (its cost counts). The 2-rank runs keep the natural batches.

Every corpus runs as one process and as 2 DDP ranks (gloo, one thread each); the in-memory
loader that the cache replaced (``mapped=False``) runs beside it up to ``--baseline-max`` pairs,
in the same run. Results: ``results/scale/scale.json`` and ``scale.png``.

    python bench/scale/scale.py                    # about an hour on 2 cores
    python bench/scale/scale.py --sizes 29000 --wmt-sizes "" --updates 20   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SMAPS_FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Anonymous")


# ------------------------------------------------------------------ corpora
def replicate(base: Path, out: Path, pairs: int) -> int:
    """A dataset of ``base``'s shards repeated (hard links) until it holds >= ``pairs`` rows,
    in whole shards; its row count."""
    from synattn_shared.manifest import MANIFEST_NAME, load_manifest, write_json

    m = load_manifest(base)
    if (out / MANIFEST_NAME).is_file():
        have = load_manifest(out)
        if have.complete and have.rows >= pairs and have.rows - pairs < m.rows:
            return have.rows
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shards, rows = [], 0
    while rows < pairs:
        for s in m.shards:
            if rows >= pairs:
                break
            name = f"part-{len(shards):05d}.parquet"
            os.link(base / s.file, out / name)
            shards.append(s.model_copy(update={"file": name, "index": len(shards),
                                               "first_row": rows}))  # fmt: skip
            rows += s.rows
    manifest = m.model_copy(update={"shards": shards, "rows": rows, "syntax_rows": rows,
                                    "dataset": f"{m.dataset} x{rows / m.rows:.1f}"})  # fmt: skip
    write_json(out / MANIFEST_NAME, manifest.model_dump(mode="json"))
    return rows


def _join(a: dict[str, Any], b: dict[str, Any], row: int) -> dict[str, Any]:
    """Two parsed pairs as one: words and labels concatenated, b's heads shifted past a's
    words (two roots), a new top split between them, targets joined with a space."""
    n = len(a["words"])
    heads = None
    if a["dep_head"] is not None and b["dep_head"] is not None:
        heads = [*a["dep_head"], *[h + n if h else 0 for h in b["dep_head"]]]
    top = max([*a["syn_dist"], *b["syn_dist"], 0]) + 1

    def cat(key: str) -> list[Any] | None:
        return None if a[key] is None or b[key] is None else [*a[key], *b[key]]

    tree = None
    if a["tree"] and b["tree"]:
        tree = f"(S {a['tree']} {b['tree']})"
    return {
        "row": row, "sent_id": f"{a['sent_id']}+{b['sent_id']}", "line": None,
        "words": [*a["words"], *b["words"]], "pretokenized": True,
        "tgt": f"{a['tgt']} {b['tgt']}", "dep_head": heads, "dep_rel": cat("dep_rel"),
        "upos": cat("upos"), "xpos": cat("xpos"),
        "syn_dist": [*a["syn_dist"], top, *b["syn_dist"]],
        "const_layer": [c + 1 for c in [*a["const_layer"], *b["const_layer"]]],
        "tree": tree, "has_syntax": bool(a["has_syntax"] and b["has_syntax"]),
    }  # fmt: skip


def joined(base: Path, out: Path) -> Path:
    """``base`` with consecutive pairs joined (WMT-like lengths), written once."""
    from synattn_shared.manifest import load_manifest
    from synattn_shared.shards import ShardDataset, ShardWriter

    if (out / "manifest.json").is_file() and load_manifest(out).complete:
        return out
    m = load_manifest(base)
    rows = list(ShardDataset(base).iter_rows())
    pairs = [_join(rows[k], rows[k + 1], k // 2) for k in range(0, len(rows) - 1, 2)]
    writer = ShardWriter(out, m.model_copy(update={"dataset": f"{m.dataset} joined"}),
                         overwrite=True)  # fmt: skip
    per = m.rows_per_shard
    for i in range(0, len(pairs), per):
        writer.write_shard(i // per, pairs[i : i + per])
    writer.finalize(len(pairs))
    return out


# ------------------------------------------------------------------ measuring a process tree
def smaps(pid: int) -> dict[str, int]:
    """A process's memory in KiB (``/proc/PID/smaps_rollup``); {} once it has gone."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in SMAPS_FIELDS:
                out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def children(pid: int) -> list[int]:
    """Every descendant of ``pid``."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        found += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def watch(
    cmd: list[str], env: dict[str, str], metrics: Path, timeout: float, sample: bool = True
) -> dict[str, Any]:
    """Run ``cmd``; peaks of each training process's memory (the ones running ``--child``),
    and the time from start to the first update in ``metrics``. ``sample=False`` reads no
    memory: reading ``smaps_rollup`` walks the page table of the mapped cache (60 ms a read at
    4.5M pairs once a few hundred batches are read, 12 ms at 29k), and on these 2 vCPUs a
    reader every 0.2 s slowed the watched trainer by 13% at 4.5M pairs (890.9 against 788.6 ms
    per update, ``bench/scale/scale_steps.py`` with and without it), so speed is measured in runs
    nobody samples."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    peaks: dict[int, dict[str, int]] = {}
    while proc.poll() is None:
        if time.time() - t0 > timeout:
            proc.kill()
            raise RuntimeError(f"{cmd}: no end after {timeout:.0f} s")
        for pid in [proc.pid, *children(proc.pid)] if sample else []:
            line = cmdline(pid)
            if "--child" not in line or "torch.distributed.run" in line:
                continue
            mem = smaps(pid)
            if not mem:
                continue
            mem["USS"] = mem.get("Private_Clean", 0) + mem.get("Private_Dirty", 0)
            peak = peaks.setdefault(pid, {})
            for k, v in mem.items():
                peak[k] = max(peak.get(k, 0), v)
        time.sleep(0.2)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    updates = [r for r in recs if r.get("event") == "update"]
    start = next(r for r in recs if r.get("event") == "start")
    return {
        "first_update_s": round(updates[0]["time"] - t0, 2),
        "load_s": round(start["time"] - t0, 2),  # process start to "start" (data loaded)
        "updates": updates[-1]["update"],
        "tokens_per_s": round(updates[-1]["tokens_per_s"], 1),
        "train_pairs": start["train_pairs"],
        "processes": [
            {k: round(v / 1024, 1) for k, v in sorted(p.items())} for p in peaks.values()
        ],  # MiB
    }


# ------------------------------------------------------------------ one measured training run
def config(data: Path, valid: Path, tokenizer: Path, updates: int) -> dict[str, Any]:
    """m30k-tiny8's model and batches (the reproduction study's CPU shape) with DEA, so batch
    building reads the syntax columns, for ``updates`` updates and one final validation."""
    return {
        "name": "scale",
        "data": {"train": str(data), "valid": str(valid), "tokenizer": str(tokenizer),
                 "max_tokens": 2048, "max_len": 100_000},
        "model": {"enc_layers": 3, "dec_layers": 3, "d_model": 128, "d_ff": 512, "heads": 8,
                  "dropout": 0.1, "attn_dropout": 0.1},
        "attention": {"enc_self": [{"name": "dea"}]},
        "optim": {"lr": 0.002, "warmup": 200},
        "train": {"max_updates": updates, "patience": 0, "bleu_every": 0, "log_every": 10,
                  "average_last": 1, "seed": 1},
        # no pair dropped: a corpus index is a row of the file (same_batches maps onto rows)
    }  # fmt: skip


def child(args: argparse.Namespace) -> None:
    """The measured process: train from ``--config`` into ``--out`` (one rank of torchrun, or
    alone)."""
    import torch

    torch.set_num_threads(1)
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.train import Trainer

    cfg = TrainConfig.model_validate(json.loads(Path(args.config).read_text()))
    if args.same_batches:
        same_batches(args.same_batches)
    Trainer(cfg, args.out, progress=False, mapped=args.mode == "mapped").train()


def same_batches(base: int) -> None:
    """Make the trainer take the base corpus's batches, each row from a random copy of the
    base across the replicated corpus (after building the real plan, whose cost counts)."""
    import numpy as np

    import synattn_trainer.train as train
    from synattn_trainer.data import Corpus, EpochIterator, batch_plan

    class Scattered(EpochIterator):
        def __init__(
            self, corpus: Corpus, max_tokens: int, seed: int, epoch: int, position: int = 0,
            rank: int = 0, world: int = 1,
        ) -> None:  # fmt: skip
            super().__init__(corpus, max_tokens, seed, epoch, position, rank, world)
            copies = len(corpus) // base
            plan = batch_plan(corpus.src_lens()[:base], corpus.tgt_lens()[:base] - 1,
                              max_tokens, seed, epoch)  # fmt: skip
            rng = np.random.default_rng([seed, epoch, 7])
            batches = []
            for b in plan[rank::world]:
                copy = rng.integers(copies, size=len(b)).tolist()
                batches.append([i + base * c for i, c in zip(b, copy, strict=True)])
            self.batches = batches  # type: ignore[assignment]

    train.EpochIterator = Scattered  # type: ignore[misc]


def train_run(
    work: Path,
    data: Path,
    args: argparse.Namespace,
    mode: str,
    ranks: int,
    updates: int,
    base: int = 0,
    sample: bool = True,
) -> dict[str, Any]:
    """One measured training process (or torchrun of ``ranks``); ``base``: the same batches
    (those of the first ``base`` rows, scattered over the copies), 0: the corpus's own."""
    out = work / "runs" / f"{data.name}-{mode}-{ranks}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg_path = out.with_suffix(".json")
    cfg_path.write_text(json.dumps(config(data, args.valid, args.tokenizer, updates)))
    me = [str(Path(__file__).resolve()), "--child", "--config", str(cfg_path), "--out",
          str(out), "--mode", mode, "--same-batches", str(base)]  # fmt: skip
    if ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={ranks}", *me]  # fmt: skip
    else:
        cmd = [sys.executable, *me]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = watch(cmd, env, out / "metrics.jsonl", timeout=args.timeout, sample=sample)
    res.update(mode=mode, ranks=ranks, batches="same" if base else "natural",
               memory_sampled_every_s=0.2 if sample else None)  # fmt: skip
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # nothing here is kept
    return res


def build_time(data: Path, tokenizer: Path) -> dict[str, Any]:
    """The cache built from nothing in a fresh process: seconds and the builder's peak RSS."""
    from synattn_trainer.encoded import cache_roots

    for root in cache_roots(data):
        shutil.rmtree(root, ignore_errors=True)
    code = (
        "import resource,time,json;t=time.perf_counter();"
        "from synattn_trainer.encoded import ensure_cache;"
        "from synattn_trainer.tokenizer import load_tokenizer;"
        f"i=ensure_cache({str(data)!r},load_tokenizer({str(tokenizer)!r}),log=lambda m:None);"
        "print(json.dumps({'seconds':round(time.perf_counter()-t,1),"
        "'peak_rss_mib':round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024),"
        "'cache_mib':round(i.meta['bytes']/2**20,1)}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


# ------------------------------------------------------------------ the benchmark
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(ROOT / "results" / "scale"))
    p.add_argument("--mode", default="mapped", help=argparse.SUPPRESS)
    p.add_argument("--same-batches", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, default=ROOT / "build" / "m30k",
                   help="`make data`'s output: train, valid, tokenizer.json")  # fmt: skip
    p.add_argument("--work", type=Path, default=ROOT / "build" / "scale")
    p.add_argument("--sizes", default="29000,290000,1000000,4500000")
    p.add_argument("--wmt-sizes", default="29000,1000000,4500000")
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--ddp-updates", type=int, default=30)
    p.add_argument("--baseline-max", type=int, default=1_200_000,
                   help="run the in-memory loader up to this many pairs")  # fmt: skip
    p.add_argument("--wmt-baseline-max", type=int, default=100_000)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--repeat", type=int, default=0,
                   help="then alternate one-process runs of the smallest and largest m30k "
                   "corpora this many rounds (medians of tokens/s; run-to-run noise on a "
                   "2-core machine is some 10%%)")  # fmt: skip
    p.add_argument("--rounds-kind", choices=("m30k", "wmt-like"), default="m30k",
                   help="the corpora that --repeat-only alternates")  # fmt: skip
    p.add_argument("--plot-only", action="store_true", help="redraw scale.png from scale.json")
    p.add_argument(
        "--repeat-only",
        action="store_true",
        help="only the alternating rounds, added to an existing scale.json",
    )
    args = p.parse_args()
    if args.child:
        child(args)
        return
    args.valid = args.data / "valid"
    args.tokenizer = args.data / "tokenizer.json"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    corpora: list[tuple[str, int]] = [("m30k", int(s)) for s in args.sizes.split(",") if s]
    corpora += [("wmt-like", int(s)) for s in args.wmt_sizes.split(",") if s]
    results: list[dict[str, Any]] = []
    json_path = out / "scale.json"
    if args.plot_only:
        plot(json.loads(json_path.read_text())["results"], out / "scale.png")
        return
    if args.repeat_only:
        doc = json.loads(json_path.read_text())
        from synattn_jobs.study.driver import git_commit

        at = git_commit()  # the code that runs, read before the rounds (half an hour)
        key = "rounds" if args.rounds_kind == "m30k" else f"rounds_{args.rounds_kind}"
        doc[key] = rounds(work, args, corpora, args.rounds_kind)
        doc[f"{key}_run"] = {"command": " ".join(sys.argv), "commit": at, **machine()}
        doc["summary"] = summarise(doc["results"], doc["rounds"], doc.get("rounds_wmt-like"))
        json_path.write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc["summary"], indent=1))
        return
    for kind, size in corpora:
        base = args.data / "train" if kind == "m30k" else joined(args.data / "train",
                                                                 work / "joined")  # fmt: skip
        data = work / f"{kind}-{size}"
        pairs = replicate(base, data, size)
        row: dict[str, Any] = {"corpus": kind, "target_pairs": size, "pairs": pairs}
        print(f"{kind} {pairs:,} pairs: building the cache", flush=True)
        row["cache_build"] = build_time(data, args.tokenizer)
        row["runs"] = []
        plan = [("mapped", 1, args.updates), ("mapped", 2, args.ddp_updates)]
        if pairs <= (args.baseline_max if kind == "m30k" else args.wmt_baseline_max):
            plan.append(("in-memory", 1, args.updates))
        from synattn_shared.manifest import load_manifest

        base_rows = load_manifest(base).rows
        for mode, ranks, updates in plan:
            r = train_run(work, data, args, mode, ranks, updates, base_rows if ranks == 1 else 0)
            print(f"  {mode} x{ranks}: first update {r['first_update_s']} s, "
                  f"{r['tokens_per_s']} tok/s, USS "
                  f"{[q.get('USS') for q in r['processes']]} MiB", flush=True)  # fmt: skip
            row["runs"].append(r)
        results.append(row)
        ends = [n for k, n in corpora if k == "m30k"] or [0]
        if args.repeat == 0 or kind != "m30k" or size not in (min(ends), max(ends)):
            shutil.rmtree(data / "encoded", ignore_errors=True)  # GiBs at 4.5M pairs
        summary = summarise(results)
        doc = {"machine": machine(), "results": results, "summary": summary,
               "command": " ".join(sys.argv)}  # fmt: skip
        json_path.write_text(json.dumps(doc, indent=1) + "\n")
    doc_rounds = rounds(work, args, corpora) if args.repeat else []
    doc = {"machine": machine(), "results": results, "rounds": doc_rounds,
           "summary": summarise(results, doc_rounds), "command": " ".join(sys.argv)}  # fmt: skip
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    plot(results, out / "scale.png")
    print(json.dumps(doc["summary"], indent=1))


def rounds(
    work: Path, args: argparse.Namespace, corpora: list[tuple[str, int]], kind: str = "m30k"
) -> list[Any]:
    """One-process runs of the smallest and largest corpora of ``kind``, alternating
    (ABAB...), on the same batches, with no memory sampled: their tokens/s in each round.
    A corpus or cache that is missing is made first, outside the rounds."""
    from synattn_shared.manifest import load_manifest

    base = args.data / "train" if kind == "m30k" else joined(args.data / "train",
                                                             work / "joined")  # fmt: skip
    sizes = [size for k, size in corpora if k == kind]
    pair = [work / f"{kind}-{sizes[0]}", work / f"{kind}-{sizes[-1]}"]
    for data, size in zip(pair, (sizes[0], sizes[-1]), strict=True):
        replicate(base, data, size)
        if not any((data / "encoded").glob("*/pairs.arrow")):
            print(f"{data.name}: building the cache", flush=True)
            build_time(data, args.tokenizer)
    base_rows = load_manifest(base).rows
    out = []
    for k in range(max(args.repeat, 1)):
        got = {}
        for data in pair:
            r = train_run(work, data, args, "mapped", 1, args.updates, base_rows, sample=False)
            got[data.name] = r["tokens_per_s"]
            print(f"  round {k + 1} {data.name}: {r['tokens_per_s']} tok/s", flush=True)
        out.append(got)
    return out


def machine() -> dict[str, Any]:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  # fmt: skip


def _run(row: dict[str, Any], mode: str, ranks: int) -> dict[str, Any] | None:
    return next((r for r in row["runs"] if r["mode"] == mode and r["ranks"] == ranks), None)


def _alternating(rounds: list[Any]) -> dict[str, Any]:
    small, big = list(rounds[0])
    ratios = [r[big] / r[small] for r in rounds]
    return {
        "corpora": [small, big],
        "tokens_per_s": {n: [r[n] for r in rounds] for n in (small, big)},
        "median_ratio": round(statistics.median(ratios), 3),
        "ratios": [round(x, 3) for x in ratios],
    }


def summarise(
    results: list[dict[str, Any]],
    rounds: list[Any] | None = None,
    wmt_rounds: list[Any] | None = None,
) -> dict[str, Any]:
    """The goals of the issue, read off the measurements (memory in MiB)."""
    out: dict[str, Any] = {}
    if rounds:
        out["alternating_rounds"] = _alternating(rounds)
    if wmt_rounds:
        out["alternating_rounds_wmt-like"] = _alternating(wmt_rounds)
    for kind in ("m30k", "wmt-like"):
        rows = [r for r in results if r["corpus"] == kind]
        if not rows:
            continue
        small = rows[0]
        big = rows[-1]
        one_s, one_b = _run(small, "mapped", 1), _run(big, "mapped", 1)
        ddp_b = _run(big, "mapped", 2)
        if not (one_s and one_b):
            continue
        growth = {f"{k}_growth_mib": round(one_b["processes"][0][k] - one_s["processes"][0][k], 1)
                  for k in ("USS", "Anonymous")}  # fmt: skip
        out[kind] = {
            "from_pairs": small["pairs"], "to_pairs": big["pairs"], **growth,
            "first_update_s": one_b["first_update_s"],
            "cache_build_s": big["cache_build"]["seconds"],
            # read while sampling memory (which slows the larger corpus): the alternating
            # rounds above are the speed measurement
            "tokens_per_s_ratio_sampled": round(one_b["tokens_per_s"] / one_s["tokens_per_s"], 3),
            "ddp_rank_uss_mib": [q["USS"] for q in ddp_b["processes"]] if ddp_b else None,
            "ddp_rank_anonymous_mib": [q["Anonymous"] for q in ddp_b["processes"]]
            if ddp_b else None,
            "one_process_uss_mib": one_b["processes"][0]["USS"],
            "one_process_anonymous_mib": one_b["processes"][0]["Anonymous"],
        }  # fmt: skip
    return out


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Log-log: private memory and start-up against pairs, mapped and in-memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {"in-memory": "tab:red", "mapped": "tab:blue", "anonymous": "tab:green"}
    for kind, marker in (("m30k", "o"), ("wmt-like", "s")):
        for mode in ("in-memory", "mapped"):
            pts = [(r["pairs"], _run(r, mode, 1)) for r in results if r["corpus"] == kind]
            pts = [(n, run) for n, run in pts if run is not None]
            if not pts:
                continue
            xs = [n for n, _ in pts]
            line = "-" if kind == "m30k" else "--"
            what = "USS" if mode == "in-memory" else "USS (with the cache's page-cache pages)"
            ax_m.plot(xs, [run["processes"][0]["USS"] for _, run in pts], line, marker=marker,
                      color=colours[mode], label=f"{kind}, {mode}: {what}")  # fmt: skip
            if mode == "mapped":
                ax_m.plot(xs, [run["processes"][0]["Anonymous"] for _, run in pts], line,
                          marker=marker, color=colours["anonymous"],
                          label=f"{kind}, mapped: anonymous")  # fmt: skip
            ax_t.plot(xs, [run["first_update_s"] for _, run in pts], line, marker=marker,
                      color=colours[mode], label=f"{kind}, {mode}")  # fmt: skip
    for ax, title, unit in ((ax_m, "memory of one training process (peak)", "MiB"),
                            (ax_t, "process start to first update", "s")):  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pairs (replicated Multi30k: a stand-in)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
