"""The parser API at two commits, alternating, in one run: did a change make it faster?

Machines drift (this 2-core CPU's rates moved 15% within an hour), so a change to the server is
judged by servers of both commits started in turn, ``--rounds`` times each, on the same
sentences: 16 one-sentence clients (sentences/s) and 64 (p99 latency), for each model-process
count in ``--workers``. The older commit is checked out into a temporary git worktree and runs
with this virtualenv, its source directories first on ``PYTHONPATH`` (so its dependencies must
be this checkout's). Prints every run and the medians, with the ratio new/old.

    python bench/parsing/parse_ab.py --old dd1cb93 [--rounds 3] [--workers 2 1] [--n 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parse import clients, percentile, start_server

from synattn_shared.datasets import multi30k_lines

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("shared/src", "services/parser/src", "services/trainer/src", "services/jobs/src")


def one_server(lines: list[str], tree: Path | None, workers: int) -> tuple[float, float]:
    """(16-client sentences/s, 64-client p99 ms) of a server running ``tree``'s code (None:
    this checkout's)."""
    env = {"PARSER_MODEL_WORKERS": str(workers)}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(tree / s) for s in SOURCES)
    proc, url = start_server(**env)
    try:
        asyncio.run(clients(url, lines[:300], 16, 1))  # warm-up
        rate, _ = asyncio.run(clients(url, lines, 16, 1))
        _, lat = asyncio.run(clients(url, lines, 64, 1))
        return rate, percentile(lat, 0.99) * 1000
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--old", required=True, help="the commit to compare against")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    lines = list(multi30k_lines("train", "en", data_dir=args.data_dir, limit=args.n))
    with tempfile.TemporaryDirectory(prefix="parse-ab-") as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(old), args.old],
            check=True,
        )
        try:
            rev = subprocess.run(
                ["git", "-C", str(old), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            print(f"old: {rev} ({args.old}); new: this checkout; Multi30k train, {args.n} lines")
            runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
            for r in range(args.rounds):
                for workers in args.workers:
                    order = ("old", "new") if r % 2 == 0 else ("new", "old")
                    for version in order:
                        res = one_server(lines, old if version == "old" else None, workers)
                        runs.setdefault((version, workers), []).append(res)
                        print(
                            f"round {r + 1} {version} {workers} model process(es): 16 clients "
                            f"{res[0]:.0f} sent/s, 64 clients p99 {res[1]:.0f} ms",
                            flush=True,
                        )
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False
            )
    for workers in args.workers:
        med = {
            v: (
                statistics.median(x[0] for x in runs[v, workers]),
                statistics.median(x[1] for x in runs[v, workers]),
            )
            for v in ("old", "new")
        }
        print(
            f"{workers} model process(es), medians of {args.rounds}: 16 clients old "
            f"{med['old'][0]:.0f}, new {med['new'][0]:.0f} sent/s (new/old "
            f"{med['new'][0] / med['old'][0]:.2f}); 64-client p99 old {med['old'][1]:.0f}, "
            f"new {med['new'][1]:.0f} ms"
        )


if __name__ == "__main__":
    main()
