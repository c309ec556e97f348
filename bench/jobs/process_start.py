"""What a queue worker's process pays in imports before it can take a job.

Every ``synattn worker``, every Celery child, every Slurm batch step and many CLI commands
import the job settings first. They once pulled in FastAPI through the HTTP deadlines they
declare (``ServeTimeouts``, then in ``synattn_shared.webapi``); the deadlines now live beside
the server that enforces them (``synattn_shared.serve``), and a worker imports no web
framework (``tests/shared/test_cli.py`` guards it).

Two figures, medians over ``--repeats`` fresh interpreters taken in turn (so a slow spell of
the machine hits both alike):

- **worker**: ``import synattn_jobs.worker, synattn_parser.settings``, as a worker starts now;
- **with FastAPI** (the baseline): the same plus ``synattn_shared.webapi``, what the same
  imports cost while the settings still pulled it in.

Run it on an otherwise idle core: it is a timing run.

    python bench/jobs/process_start.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

WORKER = "import synattn_jobs.worker, synattn_parser.settings"
BASELINE = WORKER + ", synattn_shared.webapi"


def once(code: str) -> float:
    """Seconds from starting a fresh interpreter to the end of ``code``."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    once(BASELINE)  # warm the file cache for both: every module the worker reads is in it
    now, before = [], []
    for _ in range(args.repeats):
        now.append(once(WORKER))
        before.append(once(BASELINE))
    a, b = statistics.median(now), statistics.median(before)
    print(f"worker imports:       median {a:.3f} s over {args.repeats} processes")
    print(f"with FastAPI (before): median {b:.3f} s")
    print(f"saved per process: {b - a:.3f} s ({b / a:.2f}x the worker's imports before)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
