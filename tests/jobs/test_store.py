"""The job store on SQLite and PostgreSQL: exclusive claims, heartbeats, the reaper's requeue,
cancellation and hashed tokens; and the spec checks that guard it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from synattn_jobs.errors import BadJobSpec
from synattn_jobs.specs import ExperimentSpec, inside_root
from synattn_jobs.store import JobStore, Principal, token_digest


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> JobStore:
    if request.param == "sqlite":
        return JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    return JobStore(request.getfixturevalue("postgres_url"))


def _job(store: JobStore) -> str:
    return store.create_job("train", "j", {"config": "x"}, "/tmp/run").id


def test_only_one_of_many_concurrent_claims_wins(store: JobStore) -> None:
    job_id = _job(store)
    wins: list[str] = []

    def claim(me: str) -> None:
        if store.claim(job_id, me, stale_after_s=60):
            wins.append(me)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    job = store.get(job_id)
    assert job.state == "running" and job.worker == wins[0] and job.attempts == 1
    assert not store.claim(job_id, "late", stale_after_s=60)  # a redelivery is a no-op
    assert store.finish(job_id, "succeeded", {"bleu": 1.0}, worker=wins[0])
    assert not store.claim(job_id, "late", stale_after_s=0)  # finished jobs never rerun


def test_silent_jobs_are_requeued_and_the_old_worker_loses_them(store: JobStore) -> None:
    job_id = _job(store)
    assert store.claim(job_id, "old", stale_after_s=60)
    assert store.heartbeat(job_id, "old")
    assert store.requeue_stale(stale_after_s=60) == []
    time.sleep(0.05)
    assert store.requeue_stale(stale_after_s=0.01) == [job_id]
    assert store.get(job_id).state == "queued"
    assert store.claim(job_id, "new", stale_after_s=60)
    assert not store.heartbeat(job_id, "old")  # the old worker learns it lost the job
    assert not store.finish(job_id, "succeeded", {}, worker="old")
    assert store.get(job_id).attempts == 2


def test_a_reclaimed_job_keeps_the_time_its_earlier_claims_held_it(store: JobStore) -> None:
    """A run's wall time is every claim's, not the last one's: a killed worker's claim counts
    from its start to its last heartbeat, a released one's up to the release."""
    job_id = _job(store)
    assert store.claim(job_id, "old", stale_after_s=60)
    first = store.get(job_id)
    assert first.earlier_claims_s == 0.0  # a first claim has nothing before it
    time.sleep(0.05)
    assert store.heartbeat(job_id, "old")
    killed = store.get(job_id)
    time.sleep(0.05)  # the worker dies after its last beat: this part is not counted
    assert store.requeue_stale(stale_after_s=0.01) == [job_id]
    assert store.claim(job_id, "new", stale_after_s=60)
    second = store.get(job_id)
    held = killed.heartbeat_at - first.started_at
    assert held >= 0.05 and second.earlier_claims_s == pytest.approx(held)
    assert second.started_at > killed.heartbeat_at  # the next claim's span starts afresh

    time.sleep(0.05)
    store.release(job_id, "new", "transient")
    released = store.get(job_id)
    assert released.state == "queued" and released.heartbeat_at >= second.started_at + 0.05
    assert store.claim(job_id, "third", stale_after_s=60)
    third = store.get(job_id)
    total = held + (released.heartbeat_at - second.started_at)
    assert third.earlier_claims_s == pytest.approx(total) and third.attempts == 3
    assert store.finish(job_id, "succeeded", {}, worker="third")
    assert store.get(job_id).earlier_claims_s == pytest.approx(total)  # finishing keeps it


def test_a_store_made_before_earlier_claims_were_kept_is_upgraded(tmp_path: Path) -> None:
    """An existing jobs table without the column gets it when a store opens it; its jobs
    still claim."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    job_id = _job(JobStore(url))
    with sqlite3.connect(tmp_path / "old.sqlite") as conn:
        conn.execute("ALTER TABLE jobs DROP COLUMN earlier_claims_s")
        assert "earlier_claims_s" not in {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
    reopened = JobStore(url)
    assert reopened.get(job_id).earlier_claims_s is None
    assert reopened.claim(job_id, "w", stale_after_s=60)
    assert reopened.get(job_id).earlier_claims_s == 0.0


def test_a_store_made_before_release_gates_is_upgraded(tmp_path: Path) -> None:
    """A quotas table without the release gate gets it when a store opens it; its quotas
    stay, ungated."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    JobStore(url).set_quota("alice", 3, 2)
    with sqlite3.connect(tmp_path / "old.sqlite") as conn:
        conn.execute("ALTER TABLE quotas DROP COLUMN release_only")
    reopened = JobStore(url)
    assert [(q.user, q.max_queued, q.max_running, q.release_only)
            for q in reopened.quotas()] == [("alice", 3, 2, None)]  # fmt: skip
    reopened.gate_releases(["alice"], "j1")
    assert reopened.quotas()[0].release_only == "j1"


def test_cancel_flags(store: JobStore) -> None:
    queued, running = _job(store), _job(store)
    assert store.request_cancel(queued).state == "cancelled"
    assert not store.claim(queued, "w", 60)
    store.claim(running, "w", 60)
    assert store.request_cancel(running).state == "running"
    assert store.cancel_requested(running)
    assert store.request_cancel("missing") is None


def test_only_cancelled_jobs_are_requeued_and_the_ids_returned_are_those_changed(
    store: JobStore,
) -> None:
    """The study driver puts runs cancelled under an earlier driver back to wait: a job that
    is queued, running or finished keeps its state, and is not named as put back."""
    cancelled, queued, running, done = (_job(store) for _ in range(4))
    store.request_cancel(cancelled)
    store.claim(running, "w", 60)
    store.claim(done, "w", 60)
    store.finish(done, "succeeded", {}, worker="w")
    assert {j.id for j in store.jobs(state=("queued", "cancelled"))} == {cancelled, queued}
    assert store.requeue_cancelled([cancelled, queued, running, done, "missing"]) == [cancelled]
    again = store.get(cancelled)
    assert again.state == "queued" and not again.cancel_requested and again.finished_at is None
    assert store.claim(cancelled, "w2", 60)  # dispatched as any waiting job
    assert [store.get(j).state for j in (queued, running, done)] == [
        "queued", "running", "succeeded"
    ]  # fmt: skip
    assert store.requeue_cancelled([]) == [] and store.requeue_cancelled([cancelled]) == []


def test_tokens_are_stored_as_digests(store: JobStore) -> None:
    token = store.create_token("alice")
    assert store.check_token(token) == Principal("alice", admin=False)
    assert store.check_token(token + "x") is None
    with store.session() as s:
        from synattn_jobs.store import ApiToken

        assert [t.digest for t in s.query(ApiToken)] == [token_digest(token)]
    store.revoke_token("alice")
    assert store.check_token(token) is None


def test_paths_stay_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert inside_root("a/b.yaml", tmp_path) == tmp_path / "a" / "b.yaml"
    assert inside_root(str(tmp_path / "a"), tmp_path) == tmp_path / "a"
    for bad in ("../x", "a/../../x", "/etc/passwd"):
        with pytest.raises(BadJobSpec):
            inside_root(bad, tmp_path)
    (tmp_path / "link").symlink_to("/etc")
    with pytest.raises(BadJobSpec, match="outside the data root"):
        inside_root("link/passwd", tmp_path)


def test_grid_expansion() -> None:
    spec = ExperimentSpec(name="e", config="c.yaml", variants=["vanilla", "slr-gated"],
                          seeds=[1, 2, 3], params={"optim.lr": [1e-3, 2e-3]})  # fmt: skip
    jobs = spec.expand(200)
    assert len(jobs) == 2 * 3 * 2
    names = {j["name"] for j in jobs}
    assert "slr-gated-s3-lr0.002" in names and len(names) == 12
    own = ExperimentSpec(name="e", config="c.yaml", variants={"vanilla": {}, "mine": {"x": 1}})
    assert own.expand(200)[1]["spec"].overrides == {"x": 1, "train.seed": 1}
    # a grid's fragment under a preset's name refines the preset
    tuned = ExperimentSpec(name="e", config="c.yaml", variants={
        "vanilla": {}, "slr-gated": {"data": {"max_len": 100}}})  # fmt: skip
    over = tuned.expand(200)[1]["spec"].overrides
    assert over["data"] == {"max_len": 100} and over["attention"]["enc_self"][0]["name"] == "slr"
    with pytest.raises(BadJobSpec, match="baseline"):
        ExperimentSpec(name="e", config="c", variants=["dea"]).expand(200)


def test_a_variant_can_train_more_seeds_than_the_grid_and_its_baseline_trains_them_too() -> None:
    """Rows whose seed spread needs 8 seeds train 8, the rest 5, seed-major; a variant whose
    baseline lacks one of its seeds is refused, so that every comparison stays seed-paired."""
    spec = ExperimentSpec(
        name="e", config="c.yaml", variants=["vanilla", "8L", "fixed-word", "slr-gated"],
        baselines={"fixed-word": "8L"}, seeds=[1, 2, 3, 4, 5],
        seeds_by_variant={"vanilla": [1, 2, 3, 4, 5, 6, 7, 8],
                          "slr-gated": [1, 2, 3, 4, 5, 6, 7, 8]},
    )  # fmt: skip
    jobs = spec.expand(200)
    assert len(jobs) == spec.planned_jobs() == 8 + 5 + 5 + 8
    assert [j["name"] for j in jobs][:4] == [
        "vanilla-s1",
        "8L-s1",
        "fixed-word-s1",
        "slr-gated-s1",
    ]
    tail = ["vanilla-s6", "slr-gated-s6", "vanilla-s7", "slr-gated-s7", "vanilla-s8",
            "slr-gated-s8"]  # fmt: skip
    assert [j["name"] for j in jobs][-6:] == tail
    assert {j["spec"].overrides["train.seed"] for j in jobs if j["variant"] == "8L"} == {
        1,
        2,
        3,
        4,
        5,
    }
    unpaired = ExperimentSpec(name="e", config="c.yaml", variants=["vanilla", "slr-gated"],
                              seeds=[1, 2], seeds_by_variant={"slr-gated": [1, 2, 3]})  # fmt: skip
    with pytest.raises(BadJobSpec, match=r"'slr-gated' trains seeds \[3\] that its baseline"):
        unpaired.expand(200)
    with pytest.raises(BadJobSpec, match="seeds_by_variant: 'dea' is not one of the variants"):
        ExperimentSpec(name="e", config="c.yaml", variants=["vanilla"],
                       seeds_by_variant={"dea": [1]}).expand(200)  # fmt: skip


def _open_store(url: str) -> str:
    try:
        JobStore(url)
    except Exception as exc:  # reported to the parent, which fails with it
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.mark.integration
def test_services_starting_together_on_an_empty_postgres_all_get_the_tables(
    postgres_url: str,
) -> None:
    """The compose stack's first start: the job API and three workers create the tables at
    once on an empty database. Without the schema lock some lost with a duplicate-type error
    (pg_type_typname_nsp_index) and restarted."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        outcomes = pool.map(_open_store, [postgres_url] * 6)
    assert outcomes == ["ok"] * 6
    assert JobStore(postgres_url).jobs() == []
