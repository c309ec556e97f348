"""Which heads does HeadMask mask, update after update? A replay of a run's first updates.

Re-trains a HeadMask run from its ``config.json`` (same seed, same batches) for ``--updates``
updates in a temporary folder, records the heads masked at each update, and prints how often
each head was masked. With Impt-N a few heads can be masked in most early updates, so they
barely train; the README's reproduction section quotes this for ``headmask-impt``.

    python bench/headmask_masks.py RUN_DIR [--updates 150]
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from pathlib import Path

from synattn_trainer.config import TrainConfig
from synattn_trainer.train import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("run", type=Path, help="a training run folder (holds config.json)")
    ap.add_argument("--updates", type=int, default=150)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    cfg = TrainConfig.model_validate(json.loads((args.run / "config.json").read_text()))
    if cfg.headmask.mode == "none":
        raise SystemExit(f"{args.run}: not a HeadMask run")
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), progress=False)
        masked: list[tuple[int, ...]] = []
        gates_of = trainer._headmask_gates

        def spy(batch, micro):  # type: ignore[no-untyped-def]
            gates = gates_of(batch, micro)
            if gates is not None:
                masked.append(tuple((gates[0] == 0).nonzero().flatten().tolist()))
            return gates

        trainer._headmask_gates = spy  # type: ignore[method-assign]
        trainer.train(should_stop=lambda: trainer.update >= args.updates)
        name = trainer.model.head_name
        total = trainer.model.num_heads
    count = collections.Counter(h for step in masked for h in step)
    print(f"{args.run.name}: {len(masked)} masked batches, {cfg.headmask.mode}, "
          f"{len(count)} of {total} heads ever masked")  # fmt: skip
    for head, n in count.most_common(args.top):
        print(f"  {name(head):>14}  masked in {n:4d} of {len(masked)} ({n / len(masked):.0%})")


if __name__ == "__main__":
    main()
