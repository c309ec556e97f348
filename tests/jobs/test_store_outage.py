"""A job outlives its job store's database going away for a while (a PostgreSQL restart).

CI's first compose run caught it: a progress write during ``docker compose restart postgres``
raised ``OperationalError`` out of the training loop and the job ended ``failed``. Here the real
worker code (``worker.execute``) runs a real tiny training in this process against a store whose
connection errors are switched on for a window the test chooses; the compose end-to-end test
(tests/compose/) does the same with a real PostgreSQL restart.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from synattn_jobs import runners, worker
from synattn_jobs import settings as settings_mod
from synattn_jobs.store import JobStore
from tests.jobs.conftest import tiny_yaml


class FlakyStore:
    """A real ``JobStore`` whose calls raise what a restarting PostgreSQL raises while
    ``down`` is set; ``calls_while_down`` counts them."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self.down = threading.Event()
        self.calls_while_down: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._store, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down.is_set():
                self.calls_while_down[name] = self.calls_while_down.get(name, 0) + 1
                raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))
            return real(*args, **kwargs)

        return call


@pytest.fixture
def flaky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FlakyStore:
    monkeypatch.setenv("SYNATTN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNATTN_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("SYNATTN_HEARTBEAT_S", "0.2")
    monkeypatch.setenv("SYNATTN_CANCEL_POLL_S", "0")
    monkeypatch.setenv("SYNATTN_STORE_OUTAGE_S", "30")
    settings_mod.get_settings.cache_clear()
    store = FlakyStore(JobStore(settings_mod.get_settings().database_url))
    monkeypatch.setattr(worker, "_store", store)
    monkeypatch.setattr(worker, "once_mode", lambda: False)
    yield store
    settings_mod.get_settings.cache_clear()


def _train_job(store: FlakyStore, m30k: dict[str, Path], tmp_path: Path, updates: int) -> str:
    cfg = tiny_yaml(m30k, tmp_path / "tiny.yaml", max_updates=updates,
                    checkpoint_every_updates=updates // 2)  # fmt: skip
    job = store._store.create_job("train", "outage", {"config": str(cfg)}, str(tmp_path / "run"))
    return job.id


def test_a_job_trains_on_through_a_store_outage_and_records_its_outcome_when_it_is_back(
    flaky: FlakyStore, m30k: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store goes down at the job's third update and comes back 1.5 s after the training
    ends: progress is skipped meanwhile, and the outcome waits for it."""
    job_id = _train_job(flaky, m30k, tmp_path, updates=10)
    real_progress = worker.progress_reporter

    def progress_that_starts_the_outage(jid: str) -> Any:
        report = real_progress(jid)

        def wrapped(p: dict[str, Any]) -> None:
            if p.get("update") == 3:
                flaky.down.set()
            report(p)

        return wrapped

    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.WARNING, "synattn.jobs"):
        mp.setattr(worker, "progress_reporter", progress_that_starts_the_outage)
        mp.setattr(runners, "run_train", _ending_outage(runners.run_train, flaky))
        out = worker.execute(SimpleNamespace(request=SimpleNamespace(retries=0)), job_id, "train")

    assert out == {"job": job_id, "state": "succeeded"}
    job = flaky._store.get(job_id)
    assert job is not None and job.state == "succeeded", (job.state, job.error)
    assert job.result["update"] == 10
    assert flaky.calls_while_down.get("set_progress", 0) >= 5  # updates 3..10 went unrecorded
    assert flaky.calls_while_down.get("finish", 0) >= 1  # the outcome waited for the store
    said = caplog.text
    assert "progress of" in said and "not recorded" in said
    assert "the job store is unreachable" in said and "retrying in" in said


def _ending_outage(run: Any, flaky: FlakyStore) -> Any:
    def wrapped(*a: Any, **kw: Any) -> Any:
        result = run(*a, **kw)
        threading.Timer(1.5, flaky.down.clear).start()
        return result

    return wrapped


def test_an_outage_longer_than_the_limit_gives_up_without_a_false_outcome(
    flaky: FlakyStore, m30k: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that never comes back: the worker stops waiting after ``store_outage_s`` and
    raises, so the job stays ``running`` for the reaper to requeue; it is never marked
    succeeded or failed by a guess."""
    monkeypatch.setenv("SYNATTN_STORE_OUTAGE_S", "1")
    settings_mod.get_settings.cache_clear()
    job_id = _train_job(flaky, m30k, tmp_path, updates=4)

    def run_then_lose_the_store(*a: Any, **kw: Any) -> Any:
        result = real(*a, **kw)
        flaky.down.set()
        return result

    real = runners.run_train
    monkeypatch.setattr(runners, "run_train", run_then_lose_the_store)
    with pytest.raises(OperationalError):
        worker.execute(SimpleNamespace(request=SimpleNamespace(retries=0)), job_id, "train")
    flaky.down.clear()
    job = flaky._store.get(job_id)
    assert job is not None and job.state == "running"
