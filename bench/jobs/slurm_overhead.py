"""The Slurm executor's overhead against synattn's own Celery worker, on the same job.

Two figures per executor, medians over ``--repeats`` runs of one training job (the config
below: a 2+2-layer d=64 model on ``build/m30k``, ``--updates`` updates, no evaluation):

- **submit to start**: from ``synattn submit train`` starting (the CLI's own start-up, about
  the same for both, included) to the job's claim by the process that trains it
  (``started_at`` in the job store). Celery: an idle worker, already
  running, on Redis. Slurm: ``sbatch`` into the idle local two-node cluster, Slurm's
  scheduling, the batch step's start-up (Python, imports).
- **updates/s** of the training itself, from the run's ``metrics.jsonl`` (first logged update
  to last), which should not depend on who started the process.

Needs ``make data`` (build/m30k), Redis on 6379 (.ci/services.sh) and the local Slurm cluster
(``deploy/slurm/local-cluster.sh up``, as root). Run it on an otherwise idle machine: it is a
timing run.

    python bench/jobs/slurm_overhead.py [--repeats 5] [--updates 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SYNATTN = str(Path(sys.executable).with_name("synattn"))
SLURM_CONF = "/tmp/synattn-slurm/slurm.conf"


def config(root: Path, updates: int) -> Path:
    m30k = REPO / "build" / "m30k"
    cfg = {
        "name": "overhead",
        "data": {"train": str(m30k / "train"), "valid": str(m30k / "valid"),
                 "tokenizer": str(m30k / "tokenizer.json"), "max_tokens": 1024},
        "model": {"enc_layers": 2, "dec_layers": 2, "d_model": 64, "d_ff": 128, "heads": 4},
        "train": {"max_updates": updates, "max_epochs": 1000, "bleu_every": 0, "log_every": 10,
                  "checkpoint_every_updates": updates, "average_last": 1, "seed": 1},
    }  # fmt: skip
    path = root / "overhead.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def env_for(root: Path, home: Path, executor: str) -> dict[str, str]:
    env = {
        **os.environ, "SYNATTN_HOME": str(home), "SYNATTN_DATA_ROOT": str(REPO),
        "SYNATTN_RUNS_DIR": str(root / "runs"),
        "SYNATTN_EXECUTOR": executor, "OMP_NUM_THREADS": "1", "SYNATTN_HEARTBEAT_S": "1",
        "SYNATTN_BROKER_URL": "redis://127.0.0.1:6379/12", "SLURM_CONF": SLURM_CONF,
    }  # fmt: skip
    if executor == "slurm":
        env["SYNATTN_SLURM_PARTITION"] = "debug"
    return env


def one_job(env: dict[str, str], cfg: Path, store: Any) -> dict[str, float]:
    """Submit, wait; seconds from the submit command's start to the claim, and updates/s."""
    submitted = time.time()
    out = subprocess.run([SYNATTN, "submit", "train", str(cfg), "--split", "valid"], env=env,
                         capture_output=True, text=True)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"synattn submit: {out.stderr.strip()}")
    job_id = out.stdout.strip()
    while True:
        job = store.get(job_id)
        if job is not None and job.state in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if job.state != "succeeded":
        raise SystemExit(f"job {job_id} {job.state}: {job.error}")
    ups = [json.loads(x) for x in (Path(job.out_dir) / "metrics.jsonl").read_text().splitlines()]
    ups = [u for u in ups if u.get("event") == "update"]
    rate = (ups[-1]["update"] - ups[0]["update"]) / (ups[-1]["time"] - ups[0]["time"])
    return {"start_s": job.started_at - submitted, "updates_per_s": rate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--updates", type=int, default=200)
    args = ap.parse_args()
    import redis

    from synattn_jobs.store import JobStore

    redis.Redis.from_url("redis://127.0.0.1:6379/12").flushdb()
    results: dict[str, list[dict[str, float]]] = {}
    (REPO / "build").mkdir(exist_ok=True)  # the data root is the repository: build/m30k is in it
    with tempfile.TemporaryDirectory(prefix="slurm-overhead-", dir=REPO / "build") as tmp:
        root = Path(tmp)
        cfg = config(root, args.updates)
        for executor in ("celery", "slurm"):
            home = root / f"home-{executor}"
            home.mkdir()
            env = env_for(root, home, executor)
            store = JobStore(f"sqlite:///{home / 'jobs.sqlite'}")
            worker = None
            if executor == "celery":
                worker = subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "synattn_jobs.worker", "worker",
                     "-Q", "train", "--pool", "solo", "--concurrency", "1", "--without-gossip",
                     "--without-mingle", "-n", "overhead@%h", "--loglevel", "WARNING"],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(8)  # registered and idle before the first submit
            try:
                one_job(env, cfg, store)  # warm-up: encodes the shards once, fills caches
                results[executor] = [one_job(env, cfg, store) for _ in range(args.repeats)]
            finally:
                if worker is not None:
                    worker.terminate()
                    worker.wait(timeout=60)
    med = {e: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for e, rs in results.items()}
    print(f"one training job of {args.updates} updates, median of {args.repeats} runs each:")
    print(f"{'executor':<10}{'submit to start (s)':>22}{'updates/s':>12}")
    for e, m in med.items():
        print(f"{e:<10}{m['start_s']:>22.2f}{m['updates_per_s']:>12.1f}")
    c, s = med["celery"], med["slurm"]
    print(f"Slurm / Celery: submit to start {s['start_s'] / c['start_s']:.2f}x "
          f"(+{s['start_s'] - c['start_s']:.2f} s), updates/s "
          f"{s['updates_per_s'] / c['updates_per_s']:.3f}x")  # fmt: skip


if __name__ == "__main__":
    main()
