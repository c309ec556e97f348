"""Training speed under each of torch's CPU kernel sets this machine has, measured in one run.

torch picks its vector kernels (``DEFAULT``, ``AVX2``, ``AVX512``) from the CPU, and
``ATEN_CPU_CAPABILITY`` narrows the choice. The kernels round differently, so a run continued
on a machine with a wider set follows another trajectory unless it is told to use the earlier
one (``synattn study curve`` says how); this prints what that costs, or gains. The model and
optimiser are the study's (read from m30k-conv.yaml: 3+3 layers, d=128, 8 heads) on real Multi30k
batches of ~4,096 tokens, timed through ``Trainer.step`` as in ``bench/training/variants.py``; each
kernel set runs in its own process (the variable is read when torch loads), interleaved over
repeats; medians, and the ratio to the machine's own choice.

    python bench/training/kernels.py [--updates 12] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synattn_jobs.study.curve import ISA_ORDER

REPO = Path(__file__).resolve().parents[2]
STUDY_CONFIG = REPO / "examples" / "configs" / "m30k-conv.yaml"  # its model and optimiser


def kernel_sets(native: str) -> list[str]:
    """The kernel sets a machine whose widest is ``native`` can run, widest (its own) first."""
    if native not in ISA_ORDER:
        return [native]
    return list(reversed(ISA_ORDER[: ISA_ORDER.index(native) + 1]))


def child(args: argparse.Namespace) -> None:
    """One measurement in this process's kernels: JSON on stdout."""
    import torch
    import yaml

    torch.set_num_threads(args.threads)
    from variants import measure, prepare, tokenizer_path

    from synattn_trainer.config import TrainConfig

    shards = prepare(args.data_dir, args.pairs)
    study = yaml.safe_load(STUDY_CONFIG.read_text(encoding="utf-8"))
    cfg = TrainConfig.model_validate({
        "data": {"train": str(shards), "valid": str(shards), "max_len": 128,
                 "tokenizer": str(tokenizer_path(args.pairs))},
        "model": study["model"],
        "optim": study["optim"],
    })  # fmt: skip
    rate = measure(cfg, args.warmup, args.updates, args.max_tokens)
    print(json.dumps({"isa": str(torch.backends.cpu.get_cpu_capability()), "tokens_s": rate}))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.updates, args.repeats, args.threads, args.warmup + 1) < 1:
        raise SystemExit("--updates, --repeats and --threads must be >= 1, --warmup >= 0")
    if args.child:
        child(args)
        return
    import torch

    native = str(torch.backends.cpu.get_cpu_capability())
    sets = kernel_sets(native)
    rates: dict[str, list[float]] = {s: [] for s in sets}
    argv = [sys.executable, __file__, "--child", *sys.argv[1:]]
    for _ in range(args.repeats):  # interleaved, so drift hits every kernel set alike
        for isa in sets:
            env = dict(os.environ, ATEN_CPU_CAPABILITY=isa.lower())
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if out.returncode:
                raise SystemExit(f"{isa}: the measurement failed: {out.stderr.strip()[-300:]}")
            got = json.loads(out.stdout.strip().splitlines()[-1])
            if got["isa"] != isa:
                raise SystemExit(f"asked torch for {isa} kernels, it used {got['isa']}")
            rates[isa].append(got["tokens_s"])
    print(
        f"torch {torch.__version__}, {args.threads} threads, this CPU's kernels {native}; "
        f"{args.updates} timed updates of ~{args.max_tokens} tokens, median of {args.repeats}"
    )
    base = statistics.median(rates[native])
    print(f"{'kernels':<10} {'tokens/s':>9} {'x ' + native:>10}")
    for isa in sets:
        med = statistics.median(rates[isa])
        print(f"{isa:<10} {med:9.0f} {med / base:10.2f}")


if __name__ == "__main__":
    main()
