"""Per-update time of the trainer on the 29k and 4.5M replicated corpora, on the same batches.

Where ``bench/scale/scale.py`` reads the trainer's own tokens/s (which includes building each
epoch's batch plan: 2.4 s at 4.5M pairs, once per epoch), this times ``Trainer.step`` itself and
the batch building inside it, and counts the process's page faults (major ones: cache pages read
from disk). Run ``bench/scale/scale.py`` first (it leaves the corpora and, with ``--repeat``, the
two caches under ``build/scale``); alternate the corpora, one process each:

    for n in m30k-29000 m30k-4500000 m30k-29000 m30k-4500000; do
        OMP_NUM_THREADS=1 PYTHONPATH=. python bench/scale/scale_steps.py $n; done
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import ROOT, config, same_batches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("corpus", help="a corpus under build/scale, e.g. m30k-4500000")
    p.add_argument("--updates", type=int, default=120)
    p.add_argument("--base", type=int, default=29_000, help="rows of the replicated corpus")
    p.add_argument("--no-read-ahead", action="store_true",
                   help="the trainer without its read-ahead thread (as before it)")  # fmt: skip
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    import synattn_trainer.train as train
    from synattn_trainer.config import TrainConfig

    acc: dict[str, float] = {"batch": 0.0, "step": 0.0, "n": 0}
    make_batch, step = train.make_batch, train.Trainer.step

    def timed_make(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        out = make_batch(*a, **k)
        acc["batch"] += time.perf_counter() - t
        return out

    def timed_step(self: Any, group: Any) -> Any:
        t = time.perf_counter()
        out = step(self, group)
        acc["step"] += time.perf_counter() - t
        acc["n"] += 1
        return out

    train.make_batch = timed_make  # type: ignore[assignment]
    if args.no_read_ahead:
        from synattn_trainer.encoded import MappedCorpus

        MappedCorpus.read_ahead = lambda self, index: None  # type: ignore[method-assign]
    train.Trainer.step = timed_step  # type: ignore[method-assign]
    same_batches(args.base)
    data = ROOT / "build"
    cfg = TrainConfig.model_validate(
        config(data / "scale" / args.corpus, data / "m30k" / "valid",
               data / "m30k" / "tokenizer.json", args.updates)
    )  # fmt: skip
    out = data / "scale" / "runs" / f"steps-{args.corpus}"
    shutil.rmtree(out, ignore_errors=True)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    train.Trainer(cfg, out, progress=False).train()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n = acc["n"]
    ahead = "without" if args.no_read_ahead else "with"
    print(f"{args.corpus} ({ahead} read-ahead): {n:.0f} updates, "
          f"{acc['step'] / n * 1000:.1f} ms per update, of it "
          f"{acc['batch'] / n * 1000:.1f} ms building the batch; page faults: "
          f"{r1.ru_minflt - r0.ru_minflt} minor, {r1.ru_majflt - r0.ru_majflt} major")  # fmt: skip


if __name__ == "__main__":
    main()
