"""Fair share with real worker processes: one user's queue must not starve another's.

The starvation first (``SYNATTN_DISPATCH=fifo``, every job in the broker at submit: bob's one
job starts after all of alice's), then fixed (fair dispatch: bob's job is among the first two
to start with one worker); quotas refused whole over HTTP and the CLI; a dispatcher killed
with -9 between choosing and sending; two dispatchers racing on PostgreSQL and SQLite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from synattn_jobs.store import JobStore, fair_order
from tests.jobs.conftest import Env, h, serving

QUICK = {"config": "configs/tiny.yaml", "overrides": {"train.max_updates": 2}, "evaluate": None}


def _submit(base: str, token: str, **extra: object) -> httpx.Response:
    return httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"spec": QUICK, **extra})


def _start_order(env: Env, ids: list[str]) -> list[str]:
    store = env.store()
    jobs = [store.get(j) for j in ids]
    assert all(j is not None and j.state == "succeeded" and j.attempts == 1 for j in jobs)
    return [j.id for j in sorted(jobs, key=lambda j: j.started_at)]  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["fifo", "fair"])
def test_a_late_user_is_not_starved(embedded: Env, mode: str) -> None:
    embedded.vars["SYNATTN_DISPATCH"] = mode
    embedded.vars["SYNATTN_MAX_QUEUED_PER_USER"] = "10"
    with serving(embedded) as (base, alice, env):
        bob = env.cli("token", "create", "bob").stdout.strip()
        mine = []
        for _ in range(10):
            r = _submit(base, alice)
            assert r.status_code == 201, r.text
            mine.append(r.json()["id"])
        # the eleventh is refused whole: 429, the limit in words, a Retry-After
        over = _submit(base, alice)
        assert over.status_code == 429 and over.headers["Retry-After"].isdigit()
        assert "user tester has 10 queued jobs and may have at most 10" in over.json()["detail"]
        two = {"name": "g", "config": "configs/tiny.yaml", "variants": ["vanilla", "dea"]}
        grid = httpx.post(f"{base}/v1/experiments", headers=h(alice), json=two)
        assert grid.status_code == 429
        store = env.store()
        assert len(store.jobs("queued", owner="tester")) == 10  # nothing more of hers
        assert store.experiments(owner="tester") == []
        # cancelling a queued job frees its place at once
        assert httpx.post(f"{base}/v1/jobs/{mine.pop()}/cancel",
                          headers=h(alice)).json()["state"] == "cancelled"  # fmt: skip
        again = _submit(base, alice)
        assert again.status_code == 201
        mine.append(again.json()["id"])
        late = _submit(base, bob).json()["id"]
        q = httpx.get(f"{base}/v1/queue", headers=h(bob)).json()
        assert [j["id"] for j in q["jobs"]] == [late]  # bob sees only his own job...
        counts = {u["user"]: u for u in q["users"]}  # ...and everyone's counts
        assert counts["tester"]["queued"] == 10 and counts["bob"]["queued"] == 1
        if mode == "fair":
            assert q["jobs"][0]["position"] == 2  # after alice's oldest, before her second
        env.worker("train")
        for j in [*mine, late]:
            env.wait(j, {"succeeded", "failed"}, timeout=300)
        order = _start_order(env, [*mine, late])
    if mode == "fifo":
        assert order.index(late) == 10  # today: bob's job starts eleventh
    else:
        assert order.index(late) <= 1  # fair share: among the first two
        assert all(store.get(j).release_count == 1 for j in order)  # released once each


def test_the_cli_is_refused_in_one_line(embedded: Env) -> None:
    embedded.vars["SYNATTN_MAX_QUEUED_PER_USER"] = "0"
    out = embedded.cli("submit", "train", str(embedded.root / "configs" / "tiny.yaml"),
                       check=False)  # fmt: skip
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "user local has 0 queued jobs and may have at most 0" in out.stderr
    embedded.vars["SYNATTN_MAX_QUEUED_PER_USER"] = "1000"
    embedded.cli("quota", "set", "local", "--queued", "0")
    assert "local: queued 0" in embedded.cli("quota", "list").stdout
    assert embedded.cli("submit", "train", str(embedded.root / "configs" / "tiny.yaml"),
                        check=False).returncode == 2  # fmt: skip
    assert embedded.cli("quota", "set", "../x", check=False).returncode == 2


def _jobs(store: JobStore, users: int, each: int) -> list[str]:
    ids = []
    for k in range(each):
        for u in range(users):
            ids.append(store.create_job("train", f"u{u}-{k}", {}, "/tmp/x", owner=f"u{u}").id)
    return ids


def test_fair_order_and_release_next(tmp_path: Path) -> None:
    rows = [("a1", "alice", 0, 1.0), ("a2", "alice", 0, 2.0), ("a3", "alice", 0, 3.0),
            ("b1", "bob", 0, 4.0), ("c1", "carol", 5, 6.0), ("c0", "carol", 0, 5.0)]  # fmt: skip
    # alice has 2 running: bob and carol (never started) first; carol's priority-5 job first
    assert fair_order(rows, {"alice": 2}, {"alice": 100.0}) == ["b1", "c1", "c0", "a1", "a2",
                                                               "a3"]  # fmt: skip
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    ids = _jobs(store, 3, 4)
    assert store.release_next("train", 0, 60, None) == []  # no worker: nothing released
    store.register_worker("w1", "parse,train", 2)
    store.register_worker("w2", "train", 1)
    got = store.release_next("train", 0, 60, None)
    assert [store.get(j).owner for j in got] == ["u0", "u1", "u2"]  # one per user
    assert store.release_next("train", 0, 60, None) == []  # every slot taken
    assert store.release_next("train", 2, 60, None) == [ids[3], ids[4]]  # two ahead, fairly
    store.set_quota("u2", None, 1)  # u2 may run one: skipped while it has one released
    store.register_worker("w3", "train", 10)
    more = store.release_next("train", 0, 60, None)
    assert "u2" not in {store.get(j).owner for j in more} and len(more) == 4
    # a release nobody took goes back to waiting after the timeout
    time.sleep(0.05)
    assert store.unrelease_stale(0.01) == len(got) + 2 + len(more)


def test_a_gated_user_gets_only_the_named_job_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gate_releases``: with free slots to spare, a gated user's one named job is released
    and none of its others (a user gated to a job not theirs gets none); other users are
    untouched, an admin's ``set_quota`` keeps the gate, ``quota list`` shows it, and lifting
    it lets the rest through."""
    from synattn_jobs import cli

    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    store = JobStore(url)
    alice = [store.create_job("train", f"a{k}", {}, "/tmp/x", owner="alice").id for k in range(3)]
    bob = store.create_job("train", "b0", {}, "/tmp/x", owner="bob").id
    carol = store.create_job("train", "c0", {}, "/tmp/x", owner="carol").id
    store.register_worker("w1", "train", 10)
    store.gate_releases(["alice", "carol"], alice[1])
    assert sorted(store.release_next("train", 0, 60, None)) == sorted([alice[1], bob])
    assert store.release_next("train", 0, 60, None) == []  # slots free, nothing else may go
    store.set_quota("alice", 5, None)
    assert store.release_next("train", 0, 60, None) == []
    monkeypatch.setenv("SYNATTN_DATABASE_URL", url)
    cli.quota_list()
    listed = capsys.readouterr().out
    assert f"alice: queued 5, running None, releases only job {alice[1]}" in listed
    store.gate_releases(["alice", "carol"], None)
    assert sorted(store.release_next("train", 0, 60, None)) == sorted([alice[0], alice[2], carol])
    assert [(q.user, q.release_only) for q in store.quotas()] == [("alice", None),
                                                                   ("carol", None)]  # fmt: skip


def test_a_dispatcher_killed_between_choosing_and_sending(embedded: Env) -> None:
    """kill -9 after the release committed and before the task was sent: the job is not lost
    (it is released again after SYNATTN_RELEASE_TIMEOUT_S) and runs exactly once."""
    store = embedded.store()
    with serving(embedded) as (base, token, env):
        job = _submit(base, token).json()["id"]
        store.register_worker("ghost", "train", 1)  # a slot, so the dispatcher releases
        script = (
            "import sys, time\n"
            "from synattn_jobs.dispatch import dispatch\n"
            "from synattn_jobs.settings import get_settings\n"
            "from synattn_jobs.worker import store\n"
            "def send(job, kind):\n"
            "    print('released', job, flush=True)\n"
            "    time.sleep(120)\n"
            "dispatch(store(), get_settings(), send=send)\n"
        )  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-c", script], env=env.env,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.split() == ["released", job]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = store.get(job)
        assert killed.state == "queued" and killed.released_at is not None
        assert killed.release_count == 1
        store.unregister_worker("ghost")
        env.vars["SYNATTN_RELEASE_TIMEOUT_S"] = "1"
        env.worker("train")
        done = env.wait(job, {"succeeded", "failed"}, timeout=180)
        assert done.state == "succeeded" and done.attempts == 1 and done.release_count == 2


RACE = """
import json, sys
from synattn_jobs.store import JobStore
store = JobStore(sys.argv[1])
sent = []
for _ in range(40):
    sent += store.release_next("train", 0, 600, None)
print(json.dumps(sent))
"""


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_two_dispatchers_racing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (request.getfixturevalue("postgres_url") if backend == "postgresql"
           else f"sqlite:///{tmp_path / 'jobs.sqlite'}")  # fmt: skip
    store = JobStore(url)
    _jobs(store, 5, 10)
    store.register_worker("a", "train", 12)
    store.register_worker("b", "train", 8)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", RACE, url], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]  # fmt: skip
    import json

    sent = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    both = sent[0] + sent[1]
    assert len(both) == 20 and len(set(both)) == 20  # every slot filled, none twice
    released = [j for j in store.jobs("queued", limit=100) if j.released_at is not None]
    assert sorted(j.id for j in released) == sorted(both)
    assert all(j.release_count == 1 for j in released)
    per_user = {}
    for j in released:
        per_user[j.owner] = per_user.get(j.owner, 0) + 1
    assert per_user == {f"u{u}": 4 for u in range(5)}  # 20 slots over 5 users
