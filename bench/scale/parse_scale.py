"""`synattn parse` over a million sentences: throughput from the first tenth to the last, and
memory per process over the whole run.

The corpus is a stand-in: Multi30k's training pairs (English source, German target) repeated
to ``--n`` lines; spaCy parses every line as new, so the work per sentence is what a real corpus
of Multi30k-like sentences costs. ``synattn parse`` runs as users run it (the CLI, ``--workers``
processes, shards of ``--rows-per-shard``). Every finished shard's time comes from its sidecar;
each process's memory (USS: private clean + dirty; and RSS) is sampled every second.
Reported: sentences/s overall and per worker, sentences/s in each tenth of the corpus and the
last tenth's ratio to the first, and each process's memory in the first and last tenth of the
run's time (flat memory: the ratio stays near 1). Results: ``results/scale/parse.json``.

    python bench/scale/parse_scale.py [--n 1000000] [--workers 2] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import children, machine, smaps

ROOT = Path(__file__).resolve().parents[2]


def corpus(data_dir: Path, n: int, out: Path) -> tuple[Path, Path]:
    """``n`` lines of Multi30k train on each side, cycled (written once)."""
    src, tgt = out / f"src-{n}.en", out / f"tgt-{n}.de"
    if src.is_file() and tgt.is_file():
        return src, tgt
    out.mkdir(parents=True, exist_ok=True)
    sides = []
    for lang in ("en", "de"):
        with gzip.open(data_dir / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            sides.append([line.rstrip("\n") for line in fh])
    for path, lines in ((src, sides[0]), (tgt, sides[1])):
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for k in range(n):
                fh.write(lines[k % len(lines)] + "\n")
        tmp.rename(path)
    return src, tgt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows-per-shard", type=int, default=10_000)
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--work", type=Path, default=ROOT / "build" / "parse-scale")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "scale" / "parse.json")
    args = p.parse_args()
    src, tgt = corpus(args.data_dir, args.n, args.work)
    shards = args.work / f"shards-{args.n}"
    shutil.rmtree(shards, ignore_errors=True)
    cmd = [str(Path(sys.executable).with_name("synattn")), "parse", "--src", str(src), "--tgt",
           str(tgt), "--out", str(shards), "--workers", str(args.workers),
           "--rows-per-shard", str(args.rows_per_shard)]  # fmt: skip
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: list[dict[str, Any]] = []  # {"t": seconds, "pid": {...}}
    while proc.poll() is None:
        snap: dict[str, Any] = {"t": round(time.time() - t0, 1)}
        for pid in [proc.pid, *children(proc.pid)]:
            mem = smaps(pid)
            if mem:
                uss = mem.get("Private_Clean", 0) + mem.get("Private_Dirty", 0)
                snap[str(pid)] = {"uss_mib": round(uss / 1024, 1),
                                  "rss_mib": round(mem.get("Rss", 0) / 1024, 1)}  # fmt: skip
        samples.append(snap)
        time.sleep(1.0)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"synattn parse failed:\n{err[-3000:]}")
    wall = time.time() - t0
    done = sorted(
        (json.loads(f.read_text())["rows"], f.stat().st_mtime - t0)
        for f in shards.glob("part-*.json")
    )
    times = sorted(t for _, t in done)
    per_shard = args.rows_per_shard
    tenth = max(2, len(times) // 10)  # shards per tenth of the corpus
    rates = []
    for k in range(10):
        idx = range(k * tenth, min((k + 1) * tenth, len(times)))
        if len(idx) < 2:
            continue
        if idx[0] == 0:  # the first: from the first finished shard (the models have loaded)
            n_shards, seconds = len(idx) - 1, times[idx[-1]] - times[0]
        else:
            n_shards, seconds = len(idx), times[idx[-1]] - times[idx[0] - 1]
        rates.append(round(n_shards * per_shard / max(seconds, 1e-6), 1))
    span = samples[-1]["t"] if samples else wall

    def window(a: float, b: float) -> dict[str, float]:
        """Each process's peak USS (MiB) between ``a`` and ``b`` seconds, by role."""
        peaks: dict[str, float] = {}
        for s in samples:
            if a <= s["t"] <= b:
                for pid, m in s.items():
                    if pid != "t":
                        role = "parent" if int(pid) == proc.pid else f"child {pid}"
                        peaks[role] = max(peaks.get(role, 0.0), m["uss_mib"])
        return peaks

    first = window(span * 0.1, span * 0.2)  # the first tenth after the models have loaded
    last = window(span * 0.9, span)
    result = {
        "machine": machine(),
        "command": " ".join(cmd),
        "sentences": args.n,
        "workers": args.workers,
        "wall_s": round(wall, 1),
        "sentences_per_s": round(args.n / wall, 1),
        "sentences_per_s_per_worker": round(args.n / wall / args.workers, 1),
        "sentences_per_s_by_tenth": rates,
        "last_to_first_tenth": round(rates[-1] / rates[0], 3) if rates else None,
        "uss_mib_second_tenth_of_time": first,
        "uss_mib_last_tenth_of_time": last,
        "peak_uss_mib": {
            role: max(window(0, span).get(role, 0.0), 0.0) for role in window(0, span)
        },
        "peak_rss_mib_total": round(
            max(
                (sum(m["rss_mib"] for k, m in s.items() if k != "t") for s in samples),
                default=0.0,
            ),
            1,
        ),
        "note": "Multi30k train repeated to --n lines: a stand-in corpus",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    shutil.rmtree(shards, ignore_errors=True)
    os.sync()


if __name__ == "__main__":
    main()
