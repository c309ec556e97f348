"""Training speed under each memory allocator this machine has, measured in one run, and whether
the trained weights come out bit for bit the same.

A CPU update allocates and frees tensors of tens to hundreds of MB; glibc maps every block
over 32 MB afresh and unmaps it on free, so the kernel faults in and zeroes those pages every
update (``synattn_jobs.allocator`` says more). Measured here: glibc; torch's
``THP_MEM_ALLOC_ENABLE=1`` (2 MB pages); jemalloc as PyTorch's CPU launcher sets it
(``torch.backends.xeon.run_cpu``: freed pages decay back to the kernel); and jemalloc keeping
its freed pages, what ``synattn worker`` starts a training worker with where jemalloc is
installed (``*`` marks the one it picks here).

Each allocator runs the study's model and optimiser (m30k-conv.yaml: 3+3 layers, d=128,
8 heads, an 8,000-subword vocabulary) and a preset (``--variant``) in its own process, through
``Trainer.step`` on real Multi30k batches of ~4,096 tokens from the same seed, interleaved
over repeats. It prints the median target tokens/s and its ratio to glibc, CPU seconds per
update in user and kernel mode, minor page faults per update and the peak resident memory;
then a digest of the trained parameters and Adam state, which must be one for all allocators.

    python bench/training/allocator.py [--variant vanilla] [--updates 12] [--repeats 3] \
        [--threads 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from synattn_jobs.allocator import (
    CHOSEN_BY_USER,
    JEMALLOC_KEEP,
    OPT_OUT,
    find_jemalloc,
    training_env,
)

REPO = Path(__file__).resolve().parents[2]
STUDY_CONFIG = REPO / "examples" / "configs" / "m30k-conv.yaml"  # its model and optimiser
# PyTorch's CPU launcher's jemalloc setting (torch.backends.xeon.run_cpu): purges with decay
JEMALLOC_TORCH = "oversize_threshold:1,background_thread:true,metadata_thp:auto"
ALLOCATOR_ENV = (*CHOSEN_BY_USER, OPT_OUT)  # cleared, so each run gets only its own choice


def allocators(jemalloc: str | None) -> dict[str, dict[str, str]]:
    """Each allocator this machine can run, by name, as the environment that selects it."""
    out = {"glibc": {}, "thp": {"THP_MEM_ALLOC_ENABLE": "1"}}
    if jemalloc:
        out["jemalloc-torch"] = {"LD_PRELOAD": jemalloc, "MALLOC_CONF": JEMALLOC_TORCH}
        out["jemalloc-keep"] = {"LD_PRELOAD": jemalloc, "MALLOC_CONF": JEMALLOC_KEEP}
    return out


def chosen(envs: dict[str, dict[str, str]], jemalloc: str | None) -> str:
    """The name of the allocator a training worker starts with here (``training_env``)."""
    picked = training_env({}, jemalloc)
    return next(name for name, env in envs.items() if env == picked)


def state_digest(tensors: dict[str, object]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        assert isinstance(t, torch.Tensor)
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def trained_state(trainer: object) -> dict[str, object]:
    """The model's parameters and the optimiser's per-parameter state, flattened by name."""
    model = trainer.model  # type: ignore[attr-defined]
    optim = trainer.optim  # type: ignore[attr-defined]
    state: dict[str, object] = {f"model.{k}": v for k, v in model.state_dict().items()}
    for index, slots in optim.state_dict()["state"].items():
        for key, value in slots.items():
            if hasattr(value, "dtype"):
                state[f"optim.{index}.{key}"] = value
    return state


def child(args: argparse.Namespace) -> None:
    """One measurement under this process's allocator: JSON on stdout."""
    import torch
    import yaml

    torch.set_num_threads(args.threads)
    from variants import prepare, timed_items, tokenizer_path

    from synattn_trainer.config import TrainConfig
    from synattn_trainer.presets import VARIANTS, merge
    from synattn_trainer.train import Trainer

    shards = prepare(args.data_dir, args.pairs, args.vocab)
    study = yaml.safe_load(STUDY_CONFIG.read_text(encoding="utf-8"))
    raw = merge(
        {
            "data": {"train": str(shards), "valid": str(shards), "max_len": 128,
                     "tokenizer": str(tokenizer_path(args.pairs, args.vocab))},
            "model": study["model"],
            "optim": study["optim"],
        },
        VARIANTS[args.variant],
    )  # fmt: skip
    cfg = TrainConfig.model_validate(raw)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench-allocator-") as out:
        trainer = Trainer(cfg, out, progress=False)
        with timed_items(trainer, args.max_tokens, args.warmup + args.updates) as items:
            tokens = 0
            start, before = 0.0, resource.getrusage(resource.RUSAGE_SELF)
            for step, item in enumerate(items):
                if step == args.warmup:
                    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
                    tokens = 0
                tokens += trainer.step([item]).tokens
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
        digest = state_digest(trained_state(trainer))
    n = args.updates
    print(json.dumps({
        "tokens_s": tokens / wall,
        "user_s": (after.ru_utime - before.ru_utime) / n,
        "sys_s": (after.ru_stime - before.ru_stime) / n,
        "faults": (after.ru_minflt - before.ru_minflt) / n,
        "rss_mb": after.ru_maxrss / 1024,
        "digest": digest,
    }))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--variant", default="vanilla", help="a preset (synattn presets)")
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the study uses 1)")
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--vocab", type=int, default=8000, help="joint subwords (the study's 8,000)")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument(
        "--allocators",
        nargs="+",
        default=None,
        metavar="NAME",
        help="measure only these beside glibc (thp, jemalloc-torch, jemalloc-keep)",
    )
    ap.add_argument("--jemalloc", default=None, help="libjemalloc.so path (default: ldconfig's)")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.updates, args.repeats, args.threads, args.warmup + 1) < 1:
        raise SystemExit("--updates, --repeats and --threads must be >= 1, --warmup >= 0")
    from synattn_trainer.presets import VARIANTS

    if args.variant not in VARIANTS:
        raise SystemExit(f"unknown variant {args.variant!r}; known: {', '.join(VARIANTS)}")
    if args.child:
        child(args)
        return
    jemalloc = args.jemalloc or find_jemalloc()
    if args.jemalloc and not Path(args.jemalloc).is_file():
        raise SystemExit(f"--jemalloc {args.jemalloc}: no such file")
    envs = allocators(jemalloc)
    if args.allocators:
        unknown = sorted(set(args.allocators) - set(envs))
        if unknown:
            raise SystemExit(f"--allocators: {', '.join(unknown)} not available here "
                             f"(available: {', '.join(envs)})")  # fmt: skip
        envs = {"glibc": envs["glibc"], **{n: envs[n] for n in args.allocators}}
    got: dict[str, list[dict[str, float | str]]] = {name: [] for name in envs}
    argv = [sys.executable, __file__, "--child", *sys.argv[1:]]
    threads = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    for _ in range(args.repeats):  # interleaved, so drift hits every allocator alike
        for name, extra in envs.items():
            env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENV}
            env.update(threads, **extra)
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if out.returncode:
                raise SystemExit(f"{name}: the measurement failed: {out.stderr.strip()[-300:]}")
            got[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    import torch

    print(
        f"torch {torch.__version__}, {args.threads} thread(s), kernels "
        f"{torch.backends.cpu.get_cpu_capability()}; {args.variant}, {args.updates} timed "
        f"updates of ~{args.max_tokens} tokens, median of {args.repeats}"
        + ("" if jemalloc else "; jemalloc not installed (apt install libjemalloc2)")
    )

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in got[name])

    base = med("glibc", "tokens_s")
    picked = chosen(allocators(jemalloc), jemalloc)
    print(f"{'allocator':<16} {'tokens/s':>9} {'x glibc':>8} {'user s/upd':>11} "
          f"{'sys s/upd':>10} {'faults/upd':>11} {'peak MB':>8}")  # fmt: skip
    for name in envs:
        mark = "*" if name == picked else " "
        print(f"{name + mark:<16} {med(name, 'tokens_s'):9.0f} "
              f"{med(name, 'tokens_s') / base:8.2f} {med(name, 'user_s'):11.3f} "
              f"{med(name, 'sys_s'):10.3f} {med(name, 'faults'):11.0f} "
              f"{med(name, 'rss_mb'):8.0f}")  # fmt: skip
    digests = {str(r["digest"]) for rows in got.values() for r in rows}
    same = len(digests) == 1
    print(f"trained state: {'one digest for every allocator and repeat' if same else 'DIFFERS'}"
          f" ({sorted(digests)[0][:16]}{'' if same else ', ...'})")  # fmt: skip
    if not same:
        raise SystemExit("the allocators trained different weights")


if __name__ == "__main__":
    main()
