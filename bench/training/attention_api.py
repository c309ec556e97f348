"""Latency of the attention explorer's route, ``POST /v1/jobs/{id}/attention``, cold and warm.

Serves a real ``synattn serve-jobs`` over a temporary embedded job store whose one finished
training job points at ``--checkpoint`` (by default the newest checkpoint of the learning
curve's vanilla run), then times over HTTP: the first request (the model and the split are
loaded: cold), and ``--rows`` further rows with the model cached (warm; median and p90), beside
two baselines from the same run: ``GET /v1/jobs/{id}`` (what any authenticated route costs) and
the same rows through ``synattn attention``'s code path in this process (model loaded).

    python bench/training/attention_api.py \
        [--checkpoint build/curve/vanilla-s1/checkpoints/ckpt-...pt]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--rows", type=int, default=30)
    args = ap.parse_args()
    import httpx
    import torch

    from synattn_jobs.store import JobStore
    from synattn_shared.serve import wait_answering
    from synattn_trainer.checkpoint import latest
    from synattn_trainer.data import load_corpus
    from synattn_trainer.explorer import row_attention
    from synattn_trainer.loading import load_model
    from synattn_trainer.tokenizer import load_tokenizer

    torch.set_num_threads(1)
    ckpt = args.checkpoint or latest(REPO / "build/curve/vanilla-s1/checkpoints")
    if ckpt is None or not ckpt.is_file():
        raise SystemExit("no checkpoint: run synattn study curve or pass --checkpoint")
    ckpt = ckpt.resolve()
    home = Path(tempfile.mkdtemp(prefix="attn-bench-"))
    env = {**os.environ, "SYNATTN_HOME": str(home), "SYNATTN_DATA_ROOT": str(REPO),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    store = JobStore(f"sqlite:///{home / 'jobs.sqlite'}")
    job = store.create_job("train", "bench", {}, str(ckpt.parent.parent), owner="bench")
    store.claim(job.id, "bench", 60)
    store.finish(job.id, "succeeded", {"checkpoint": str(ckpt), "bleu": 0.0})
    synattn = str(Path(sys.executable).with_name("synattn"))
    token = subprocess.run([synattn, "token", "create", "bench"], env=env, check=True,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    port = free_port()
    server = subprocess.Popen([synattn, "serve-jobs", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        wait_answering(f"{base}/v1/health", server, timeout=60)
        url = f"{base}/v1/jobs/{job.id}/attention"
        client = httpx.Client(headers=headers, timeout=120)

        def post(row: int) -> float:
            t0 = time.perf_counter()
            client.post(url, json={"split": args.split, "row": row}).raise_for_status()
            return (time.perf_counter() - t0) * 1000

        def get() -> float:
            t0 = time.perf_counter()
            client.get(f"{base}/v1/jobs/{job.id}").raise_for_status()
            return (time.perf_counter() - t0) * 1000

        cold = post(0)
        warm = [post(k) for k in range(1, args.rows + 1)]
        plain = [get() for _ in range(args.rows)]
        model, cfg = load_model(ckpt)
        model.eval()
        tok = load_tokenizer(cfg.data.tokenizer)
        corpus = load_corpus(getattr(cfg.data, args.split), tok, require_tgt=False,
                             source_eos=cfg.data.source_eos)  # fmt: skip
        direct = []
        for k in range(1, args.rows + 1):
            t0 = time.perf_counter()
            row_attention(model, tok, corpus, k)
            direct.append((time.perf_counter() - t0) * 1000)
    finally:
        server.terminate()
        server.wait(timeout=30)
    q = statistics.quantiles(warm, n=10)
    w, d = statistics.median(warm), statistics.median(direct)
    print(f"checkpoint {ckpt.relative_to(REPO) if ckpt.is_relative_to(REPO) else ckpt}; "
          f"{args.split} rows 0..{args.rows}; one torch thread")  # fmt: skip
    print(f"cold (model and split loaded): {cold:.0f} ms")
    g = statistics.median(plain)
    print(f"warm: median {w:.1f} ms, p90 {q[-1]:.1f} ms over {len(warm)} rows")
    print(f"baselines, same run: GET /v1/jobs/ID (auth, store, HTTP) median {g:.1f} ms; the "
          f"arrays alone in-process median {d:.1f} ms; warm route / (GET + arrays) = "
          f"{w / (g + d):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
