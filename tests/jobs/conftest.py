"""Job-queue fixtures: a data root with a tiny training config, settings for subprocesses, and
real worker, uvicorn and redis-server processes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from synattn_shared.serve import wait_answering
from tests.conftest import free_port
from tests.trainer.conftest import m30k  # noqa: F401  (session fixture: parsed data + vocab)

SYNATTN = str(Path(sys.executable).with_name("synattn"))
REDIS = "redis://127.0.0.1:6379"


def tiny_yaml(paths: dict[str, Path], path: Path, **train: object) -> Path:
    """A 2+2-layer d=32 config that trains in seconds; checkpoints every 5 updates, the last two
    averaged (inside the final half of a 10-update run)."""
    cfg = {
        "name": "tiny",
        "data": {"train": str(paths["train"]), "valid": str(paths["valid"]),
                 "tokenizer": str(paths["tokenizer"]), "max_tokens": 512},
        "model": {"enc_layers": 2, "dec_layers": 2, "d_model": 32, "d_ff": 64, "heads": 4,
                  "dropout": 0.1, "attn_dropout": 0.1},
        "optim": {"lr": 0.003, "warmup": 20},
        "train": {"max_updates": 10, "bleu_every": 0, "log_every": 1, "seed": 7,
                  "checkpoint_every_updates": 5, "average_last": 2, "average_window": 0.5,
                  **train},
        "decode": {"beam": 2, "batch_sentences": 60},
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


class Env:
    """Settings of one isolated queue (store, broker, data root) and helpers to use it."""

    def __init__(self, root: Path, home: Path, broker: str, database: str | None = None) -> None:
        self.root, self.home = root, home
        self.vars = {
            "SYNATTN_HOME": str(home),
            "SYNATTN_DATA_ROOT": str(root),
            "SYNATTN_BROKER_URL": broker,
            "SYNATTN_HEARTBEAT_S": "0.5",
            "SYNATTN_STALE_AFTER_S": "3",
            "SYNATTN_CANCEL_POLL_S": "0.2",
            "OMP_NUM_THREADS": "1",
        }
        if database:
            self.vars["SYNATTN_DATABASE_URL"] = database
        self.workers: list[subprocess.Popen[bytes]] = []

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **self.vars}

    def cli(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([SYNATTN, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"synattn {' '.join(args)}: {proc.returncode}\n{proc.stderr}")
        return proc

    def worker(self, queues: str = "parse,train") -> subprocess.Popen[bytes]:
        log = open(self.home / f"worker-{len(self.workers)}.log", "ab")  # noqa: SIM115
        p = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "synattn_jobs.worker", "worker", "-Q", queues,
             "--pool", "solo", "--concurrency", "1", "--loglevel", "INFO",
             "--without-gossip", "--without-mingle",
             "-n", f"w{len(self.workers)}-{uuid.uuid4().hex[:6]}@%h"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.workers.append(p)
        return p

    def store(self):
        from synattn_jobs.settings import JobSettings
        from synattn_jobs.store import JobStore

        url = self.vars.get("SYNATTN_DATABASE_URL") or JobSettings(home=self.home).database_url
        return JobStore(url)

    def wait(self, job_id: str, states: set[str], timeout: float = 180, **cond: int):
        """Poll the store until the job is in ``states`` (and progress[k] >= v for cond)."""
        store = self.store()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = store.get(job_id)
            if (
                job is not None
                and job.state in states
                and all((job.progress or {}).get(k, -1) >= v for k, v in cond.items())
            ):
                return job
            time.sleep(0.2)
        job = store.get(job_id)
        logs = "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.home.glob("worker-*.log"))
        )
        raise AssertionError(f"job {job_id} is {job and job.state} {job and job.progress}\n{logs}")

    def stop(self) -> None:
        """End every worker at once: a test that wants a warm shutdown signals it itself, and
        a worker's Celery warm shutdown took 2-5 s of every teardown. A job's training
        processes are tethered to their worker and die with it."""
        for p in self.workers:
            if p.poll() is None:
                p.kill()
        for p in self.workers:
            p.wait(timeout=30)


@pytest.fixture
def data_root(m30k: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """The folder jobs may read and write: the pytest base temp (holds the parsed data)."""
    root = tmp_path_factory.getbasetemp()
    tiny_yaml(m30k, root / "configs" / "tiny.yaml")
    tiny_yaml(m30k, root / "configs" / "long.yaml", max_updates=100_000, max_epochs=1000)
    tiny_yaml(m30k, root / "configs" / "mid.yaml", max_updates=40)
    return root


@pytest.fixture
def embedded(data_root: Path, tmp_path: Path) -> Iterator[Env]:
    """A queue with the embedded SQLite broker and store."""
    env = Env(
        data_root, tmp_path / "home", f"sqla+sqlite:///{tmp_path / 'home' / 'broker.sqlite'}"
    )
    (tmp_path / "home").mkdir()
    yield env
    env.stop()


def _redis_db() -> int:
    """A Redis database of its own for this test process: one per pytest-xdist worker (gw0,
    gw1, ...: databases 8-13), else one from the process id."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return 8 + int(worker[2:]) % 6
    return 8 + os.getpid() % 6


@pytest.fixture
def over_redis(data_root: Path, tmp_path: Path) -> Iterator[Env]:
    """A queue on the local Redis (a database flushed first) with a SQLite store."""
    import redis

    db = _redis_db()
    redis.Redis.from_url(f"{REDIS}/{db}").flushdb()
    (tmp_path / "home").mkdir()
    env = Env(data_root, tmp_path / "home", f"{REDIS}/{db}")
    yield env
    env.stop()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database on 127.0.0.1:5432, dropped afterwards."""
    import psycopg

    name = f"synattn_test_{uuid.uuid4().hex[:8]}"
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as c:
            c.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL on 127.0.0.1:5432 is needed (.ci/services.sh starts it): {exc}")
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[dict[str, object]]:
    """A redis-server of our own with AOF (fsync always), restartable by the test."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is needed for the restart test (apt-get install redis-server)")
    port = free_port()
    d = tmp_path / "redis"
    d.mkdir()
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--appendonly",
            "yes", "--appendfsync", "always", "--save", "",
            "--maxmemory-policy", "noeviction"]  # fmt: skip
    state: dict[str, object] = {"port": port, "url": f"redis://127.0.0.1:{port}/0"}

    def start() -> subprocess.Popen[bytes]:
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        state["proc"] = p
        return p

    state["start"] = start
    start()
    yield state
    p = state["proc"]
    assert isinstance(p, subprocess.Popen)
    p.kill()
    p.wait()


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def serving(env: Env, **settings: str) -> Iterator[tuple[str, str, Env]]:
    """A real ``synattn serve-jobs`` over ``env`` (short header and body deadlines, plus any
    ``SYNATTN_*`` ``settings``) and a user token named ``tester``."""
    port = free_port()
    log = open(env.home / "api.log", "wb")  # noqa: SIM115
    limits = {"SYNATTN_HEADER_TIMEOUT_S": "2", "SYNATTN_BODY_TIMEOUT_S": "3", **settings}
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("synattn")), "serve-jobs", "--port", str(port)],
        env={**env.env, **limits}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_answering(f"{base}/v1/health", proc, timeout=30)
        except (RuntimeError, TimeoutError) as exc:
            raise AssertionError(f"{exc}\n{(env.home / 'api.log').read_text()}") from None
        token = env.cli("token", "create", "tester").stdout.strip()
        yield base, token, env
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def api(embedded: Env) -> Iterator[tuple[str, str, Env]]:
    """The job API over a fresh embedded queue, for one test."""
    with serving(embedded) as served:
        yield served


@pytest.fixture(scope="module")
def shared_api(
    m30k: dict[str, Path],  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str, Env]]:
    """One job API for a whole module of tests that do not run jobs (hostile input)."""
    root = tmp_path_factory.getbasetemp()
    tiny_yaml(m30k, root / "configs" / "tiny.yaml")
    home = tmp_path_factory.mktemp("api-home")
    env = Env(root, home, f"sqla+sqlite:///{home / 'broker.sqlite'}")
    with serving(env) as served:
        yield served
