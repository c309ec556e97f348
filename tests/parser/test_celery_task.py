"""The shard task on a real Celery worker process over a real Redis broker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from synattn_parser.batch import ShardJob, get_parser, plan_manifest
from synattn_parser.settings import ParserSettings
from synattn_shared.features import FeatureOptions
from synattn_shared.shards import ShardDataset, ShardWriter

REDIS_URL = os.environ.get("SYNATTN_TEST_REDIS", "redis://127.0.0.1:6379/15")


@pytest.fixture(scope="module")
def broker() -> str:
    try:
        redis.Redis.from_url(REDIS_URL).flushdb()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is needed at {REDIS_URL} (.ci/run starts it): {exc}")
    return REDIS_URL


@pytest.fixture(scope="module")
def worker(
    broker: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {**os.environ, "SYNATTN_BROKER_URL": broker, "SYNATTN_RESULT_BACKEND": broker}
    cmd = [
        sys.executable, "-m", "celery", "-A", "synattn_parser.tasks", "worker", "-Q", "parse",
        "--pool", "solo", "-n", f"parse-test-{os.getpid()}@%h", "--without-gossip",
        "--without-mingle", "--loglevel", "INFO",
    ]  # fmt: skip
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    yield proc
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_shards_parsed_by_a_worker_form_a_dataset(
    broker: str, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    src = tmp_path / "src.txt"
    lines = [f"The {k}th dog chased a cat ." for k in range(25)]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "ds"
    settings = ParserSettings()
    options = FeatureOptions()
    info = get_parser("spacy", settings).info
    writer = ShardWriter(out, plan_manifest(src, None, "ds", info, options, rows_per_shard=10))
    client = Celery(broker=broker, backend=broker)
    jobs = [
        ShardJob(
            out_dir=str(out),
            index=i,
            rows_per_shard=10,
            src=str(src),
            settings=settings.model_dump(),
            features=options.model_dump(),
        )
        for i in range(3)
    ]
    results = [
        client.send_task("synattn.parse_shard", args=[job.model_dump()], queue="parse")
        for job in jobs
    ]
    infos = [r.get(timeout=120) for r in results]
    assert [i["rows"] for i in infos] == [10, 10, 5]
    manifest = writer.finalize(expected_rows=25)
    rows = list(ShardDataset(out, verify=True).iter_rows())
    assert manifest.complete and [r["row"] for r in rows] == list(range(25))
    assert rows[13]["words"] == lines[13].split() and rows[13]["has_syntax"]

    # redelivery (a task run twice) finds its shard written and returns it unchanged
    mtime = (out / "part-00001.parquet").stat().st_mtime_ns
    again = client.send_task("synattn.parse_shard", args=[jobs[1].model_dump()], queue="parse")
    assert again.get(timeout=60) == infos[1]
    assert (out / "part-00001.parquet").stat().st_mtime_ns == mtime
    assert worker.poll() is None
