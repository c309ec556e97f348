"""Where the parser API's time goes under load: server configurations side by side, alternating.

Each ``--config`` is a set of ``PARSER_*`` settings, for example ``PARSER_MODEL_WORKERS=1``
(``-`` alone is the defaults). Each round starts a server for each configuration in turn and
drives it with ``--clients`` one-sentence clients over the first ``--n`` Multi30k sentences. It
prints sentences/s, p50/p99 latency, the CPU (in cores) of the HTTP process, of each model
process and of this load generator, the HTTP process's CPU per request, and the mean
micro-batch size (from ``/metrics``). On a machine whose cores are all busy, this says which
process the time goes to. ``bench/parsing/parse.py`` measures the goals; this explains them.

    python bench/parsing/parse_load.py --config - --config PARSER_MODEL_WORKERS=1 [--clients 16 64]
        [--rounds 2] [--n 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parse import clients, percentile, start_server

from synattn_shared.datasets import multi30k_lines
from synattn_shared.heap import freeze_heap

REPO = Path(__file__).resolve().parents[2]


def parse_config(text: str) -> dict[str, str]:
    """``NAME=VALUE,NAME=VALUE`` (or ``-``) as an environment."""
    if text.strip() == "-":
        return {}
    env = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.startswith("PARSER_"):
            raise SystemExit(f"--config {text!r}: expected PARSER_NAME=VALUE[,...] or -")
        env[name.strip()] = value.strip()
    return env


def cpu_seconds(procs: list[psutil.Process]) -> list[float]:
    return [sum(p.cpu_times()[:2]) for p in procs]


def batch_stats(url: str) -> tuple[float, float]:
    """(count, sum) of the server's micro-batch size histogram."""
    count = total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("synattn_parser_batch_size_count"):
            count = float(line.split()[-1])
        elif line.startswith("synattn_parser_batch_size_sum"):
            total = float(line.split()[-1])
    return count, total


def measure(
    env: dict[str, str], lines: list[str], concurrency: list[int]
) -> list[tuple[int, float, str]]:
    """One server with ``env``: per client count, (clients, sentences/s, the line to print)."""
    proc, url = start_server(**env)
    out = []
    try:
        asyncio.run(clients(url, lines[:300], max(concurrency), 1))  # warm-up
        server = psutil.Process(proc.pid)
        # the model processes (the multiprocessing resource tracker does no work under load)
        procs = [server, *server.children(recursive=True), psutil.Process()]
        for c in concurrency:
            b0, cpu0, t0 = batch_stats(url), cpu_seconds(procs), time.perf_counter()
            rate, lat = asyncio.run(clients(url, lines, c, 1))
            wall = time.perf_counter() - t0
            cpu1, b1 = cpu_seconds(procs), batch_stats(url)
            cores = [(b - a) / wall for a, b in zip(cpu0, cpu1, strict=True)]
            models = [round(x, 2) for x in cores[1:-1] if x > 0.02]
            batch = (b1[1] - b0[1]) / max(b1[0] - b0[0], 1)
            line = (
                f"{c:3d} clients {rate:7.1f} sent/s  p50 {percentile(lat, 0.5) * 1000:5.1f} ms  "
                f"p99 {percentile(lat, 0.99) * 1000:5.1f} ms | cores: HTTP {cores[0]:.2f}, "
                f"models {models}, load generator {cores[-1]:.2f}; HTTP "
                f"{cores[0] * wall / len(lines) * 1000:.2f} ms/request; batch {batch:.1f}"
            )
            out.append((c, rate, line))
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--config", action="append", required=True, help="PARSER_X=1,... or -")
    ap.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    configs = [(text, parse_config(text)) for text in args.config]
    lines = list(multi30k_lines("train", "en", data_dir=args.data_dir, limit=args.n))
    freeze_heap()  # this process is the load generator: no full collections of start-up objects
    rates: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for text, env in configs:
            print(f"round {r + 1}, config {text}:", flush=True)
            for c, rate, line in measure(env, lines, args.clients):
                print("   ", line, flush=True)
                rates.setdefault((text, c), []).append(rate)
    print("medians, sentences/s:")
    for (text, c), xs in rates.items():
        print(
            f"    {text}, {c} clients: {statistics.median(xs):.1f}  "
            f"(runs {[round(x) for x in xs]})"
        )


if __name__ == "__main__":
    main()
