"""Integration: jobs through real Celery worker processes, over Redis and the embedded broker,
with the job store on SQLite and PostgreSQL; worker loss, broker restart and cancellation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.jobs.conftest import Env


def _submit(env: Env, config: str = "configs/tiny.yaml", *extra: str) -> str:
    return env.cli("submit", "train", str(env.root / config), *extra).stdout.strip()


def _events(job_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (job_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_job_succeeds_over_the_embedded_broker(embedded: Env) -> None:
    job_id = _submit(embedded)
    assert embedded.store().get(job_id).state == "queued"
    embedded.worker()
    job = embedded.wait(job_id, {"succeeded", "failed"})
    assert job.state == "succeeded", job.error
    assert job.attempts == 1
    assert job.result["update"] == 10 and job.result["bleu"] >= 0
    assert "nrefs:1" in job.result["bleu_signature"]
    assert Path(job.result["hyp"]).is_file() and Path(job.result["checkpoint"]).is_file()
    out = embedded.cli("jobs").stdout
    assert job_id in out and "succeeded" in out


def test_train_job_succeeds_over_redis_with_postgres_store(
    over_redis: Env, postgres_url: str
) -> None:
    over_redis.vars["SYNATTN_DATABASE_URL"] = postgres_url
    job_id = _submit(over_redis)
    over_redis.worker("train")
    job = over_redis.wait(job_id, {"succeeded", "failed"})
    assert job.state == "succeeded", job.error
    assert over_redis.store().engine.dialect.name == "postgresql"


def test_parse_job_over_redis(over_redis: Env, m30k: dict[str, Path]) -> None:
    src = over_redis.root / "parse-src.en"
    src.write_text("A dog runs .\nTwo men play chess in a park .\n", encoding="utf-8")
    out = over_redis.root / "parsed" / f"p{os.getpid()}-{time.time_ns()}"
    job_id = over_redis.cli(
        "submit", "parse", "--src", str(src), "--out", str(out), "--rows-per-shard", "1"
    ).stdout.strip()
    over_redis.worker("parse")
    job = over_redis.wait(job_id, {"succeeded", "failed"}, timeout=120)
    assert job.state == "succeeded", job.error
    assert job.result["rows"] == 2 and job.result["shards"] == 2
    assert (out / "manifest.json").is_file()
    # a Latin-1 corpus: refused at submit with its line and both fixes, run with --encoding
    latin = over_redis.root / "parse-src-latin1.en"
    latin.write_bytes("A dog runs .\nGrüße from Köln .\n".encode("latin-1"))
    bad = over_redis.cli("submit", "parse", "--src", str(latin), "--out", str(out) + "-l",
                         check=False)  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "line 2" in bad.stderr and "--encoding" in bad.stderr
    job_id = over_redis.cli("submit", "parse", "--src", str(latin), "--out", str(out) + "-l",
                            "--encoding", "latin-1").stdout.strip()  # fmt: skip
    job = over_redis.wait(job_id, {"succeeded", "failed"}, timeout=120)
    assert job.state == "succeeded", job.error
    assert job.spec["encoding"] == "iso8859-1" and job.result["rows"] == 2
    unknown = over_redis.cli("submit", "parse", "--src", str(latin), "--out", str(out) + "-x",
                             "--encoding", "klingon", check=False)  # fmt: skip
    assert unknown.returncode == 2 and "unknown text encoding 'klingon'" in unknown.stderr
    rot = over_redis.cli(
        "submit",
        "parse",
        "--src",
        str(latin),
        "--out",
        str(out) + "-x",
        "--encoding",
        "rot13",
        check=False,
    )  # a codec, but no text encoding
    assert rot.returncode == 2 and "unknown text encoding 'rot13'" in rot.stderr


def test_killed_worker_job_resumes_from_its_checkpoint(over_redis: Env) -> None:
    job_id = _submit(over_redis, "configs/mid.yaml")
    first = over_redis.worker("train")
    over_redis.wait(job_id, {"running"}, timeout=120, update=12)
    run = Path(over_redis.store().get(job_id).out_dir)
    assert list((run / "checkpoints").glob("ckpt-*.pt"))
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = over_redis.store().get(job_id).progress["update"]
    assert killed_at < 40
    over_redis.worker("train")  # its reaper finds the silent job and requeues it
    job = over_redis.wait(job_id, {"succeeded", "failed"}, timeout=240)
    assert job.state == "succeeded", job.error
    assert job.attempts == 2
    events = _events(run)
    starts = [e for e in events if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True]
    assert 5 <= starts[1]["update"] <= killed_at  # from the last checkpoint, not from zero
    assert [e["update"] for e in events if e["event"] == "end"] == [40]  # completed once


def test_queued_jobs_survive_a_redis_restart(
    data_root: Path, tmp_path: Path, own_redis: dict
) -> None:
    (tmp_path / "home").mkdir()
    env = Env(data_root, tmp_path / "home", own_redis["url"])
    try:
        ids = [_submit(env), _submit(env)]
        proc = own_redis["proc"]
        proc.send_signal(signal.SIGKILL)  # no clean shutdown: only the AOF keeps the queue
        proc.wait()
        own_redis["start"]()
        env.worker("train")
        for job_id in ids:
            job = env.wait(job_id, {"succeeded", "failed"})
            assert job.state == "succeeded", job.error
    finally:
        env.stop()


def test_cancelling_a_running_job(embedded: Env) -> None:
    job_id = _submit(embedded, "configs/long.yaml")
    embedded.worker("train")
    embedded.wait(job_id, {"running"}, timeout=120, update=3)
    t0 = time.monotonic()
    out = embedded.cli("cancel", job_id).stdout
    assert "cancel requested" in out
    job = embedded.wait(job_id, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.state == "cancelled"
    assert time.monotonic() - t0 < 30
    assert job.result == {} and job.progress["update"] < 100_000


def test_watch_exit_status_and_bad_config(embedded: Env) -> None:
    bad = embedded.cli("submit", "train", "/etc/passwd", check=False)
    assert bad.returncode == 2 and "outside the data root" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    cfg = embedded.root / "configs" / "broken.yaml"
    cfg.write_text("model: {d_model: -1}\n", encoding="utf-8")
    bad = embedded.cli("submit", "train", str(cfg), check=False)
    assert bad.returncode == 2 and "broken.yaml" in bad.stderr
    job_id = _submit(embedded)
    embedded.cli("cancel", job_id)
    watch = embedded.cli("watch", job_id, "--interval", "0.2", check=False)
    assert watch.returncode == 1 and "cancelled" in watch.stderr
    assert subprocess.run  # the CLI is a real process throughout


pytestmark = pytest.mark.integration


def _synattn_worker(env: Env, *args: str) -> subprocess.Popen[bytes]:
    log = open(env.home / f"cli-worker-{len(env.workers)}.log", "ab")  # noqa: SIM115
    w = subprocess.Popen(
        [str(Path(sys.executable).with_name("synattn")), "worker", *args],
        env=env.env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    env.workers.append(w)
    return w


def test_a_once_worker_takes_exactly_one_of_a_parse_and_a_train_job(
    over_redis: Env, m30k: dict[str, Path]
) -> None:
    """``synattn worker --once``, the command of the Kubernetes Jobs, on both queues with one
    job on each: a ``--once`` worker runs one, leaves the other queued, and exits 0; the next
    ``--once`` worker runs the other."""
    src = over_redis.root / "once-src.en"
    src.write_text("A dog runs .\nTwo men play chess in a park .\n", encoding="utf-8")
    out = over_redis.root / "parsed" / f"once-{os.getpid()}-{time.time_ns()}"
    parse = over_redis.cli("submit", "parse", "--src", str(src), "--out", str(out)).stdout.strip()
    train = _submit(over_redis)
    store = over_redis.store()
    for round_ in (1, 2):
        w = _synattn_worker(over_redis, "--queues", "parse,train", "--once")
        assert w.wait(timeout=240) == 0
        states = [store.get(j).state for j in (parse, train)]
        assert sorted(states) == (["queued", "succeeded"] if round_ == 1 else ["succeeded"] * 2)
    assert sum(store.get(j).attempts for j in (parse, train)) == 2


def test_sigterm_stops_the_worker_cleanly_and_the_job_resumes_elsewhere(over_redis: Env) -> None:
    """SIGTERM to ``synattn worker`` mid-training: the Celery child shuts down warm, the job is
    checkpointed and requeued, no process is left behind, and another worker finishes it from
    that checkpoint."""
    import psutil

    job_id = _submit(over_redis, "configs/mid.yaml")
    log = over_redis.home / f"cli-worker-{len(over_redis.workers)}.log"
    w = _synattn_worker(over_redis, "--queues", "train")
    over_redis.wait(job_id, {"running"}, timeout=120, update=8)
    family = [psutil.Process(w.pid), *psutil.Process(w.pid).children(recursive=True)]
    assert len(family) >= 2  # the CLI and its Celery worker
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(family, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    job = over_redis.store().get(job_id)
    assert job.state == "queued" and "shut down" in (job.error or "")
    said = log.read_text(errors="replace")
    assert "ready." in said and "Warm shutdown" in said, said[-2000:]  # Celery's own words
    stopped_at = job.progress["update"]
    assert stopped_at < 40
    over_redis.worker("train")
    job = over_redis.wait(job_id, {"succeeded", "failed"}, timeout=240)
    assert job.state == "succeeded", job.error
    assert job.attempts == 2
    events = _events(Path(job.out_dir))
    starts = [e for e in events if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True]
    assert starts[1]["update"] == stopped_at  # saved at the stop, resumed right there
    assert [e["update"] for e in events if e["event"] == "end"] == [stopped_at, 40]
