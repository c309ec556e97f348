"""Data-parallel training jobs from the queue: a 2-process job (gloo on CPU) through Redis and
a real Celery worker that owns 2 devices, with the one-process job's result; a job no live
worker could run refused at submit (HTTP 422, CLI exit 2); a killed rank failing the job and
leaving the worker free; cancellation stopping every rank with a resume point; a worker killed
with -9 taking its ranks with it, and the job resuming from its checkpoint elsewhere. Plus the
dispatcher's arithmetic in processes and devices, without processes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from synattn_jobs.ddp import device_env
from synattn_jobs.errors import BadJobSpec
from synattn_jobs.settings import JobSettings
from synattn_jobs.specs import ExperimentSpec, Resources, TrainJobSpec
from synattn_jobs.store import JobStore, fair_order
from synattn_jobs.submit import check_processes, submit_train
from tests.jobs.conftest import Env, h, serving

RESULT_KEYS = {  # what a one-process training job's result holds (runners.run_train)
    "update", "epoch", "stopped", "best_valid_loss", "checkpoint", "selection",
    "averaged_updates", "checkpoint_update", "max_updates", "parameters", "tokens_per_s",
    "metrics", "split", "bleu", "bleu_signature", "chrf", "hyp", "ref", "by_selection",
}  # fmt: skip


def _submit(env: Env, config: str, *extra: str) -> str:
    return env.cli("submit", "train", str(env.root / config), *extra).stdout.strip()


def _events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _rank_pids(run: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted((run / "ddp").glob("rank-*.pid"))]


def _gone(pids: list[int], timeout: float = 30) -> bool:
    """Every pid has exited (zombies count as gone) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [
            p for p in pids
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]  # fmt: skip
        if not alive:
            return True
        time.sleep(0.2)
    return False


def _ddp_worker(env: Env) -> None:
    env.vars["SYNATTN_WORKER_DEVICES"] = "2"
    env.worker("train")


pytestmark = pytest.mark.integration


def test_a_two_process_job_runs_through_the_queue(over_redis: Env) -> None:
    """Accepted before any worker registered (up to SYNATTN_MAX_PROCESSES), run by a worker
    owning 2 devices under torchrun, with the result a one-process job has; then, with that
    worker live, 3 processes are refused over HTTP and from the CLI, saying why."""
    with serving(over_redis) as (base, token, env):
        spec = {"config": "configs/tiny.yaml", "resources": {"processes": 2}}
        r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"spec": spec})
        assert r.status_code == 201, r.text
        assert r.json()["processes"] == 2 and r.json()["spec"]["resources"] == {"processes": 2}
        job_id = r.json()["id"]
        _ddp_worker(env)
        job = env.wait(job_id, {"succeeded", "failed"}, timeout=240)
        assert job.state == "succeeded", job.error
        assert set(job.result) >= RESULT_KEYS
        assert job.result["update"] == 10 and job.result["stopped"] == "max_updates"
        assert job.result["bleu"] >= 0 and "nrefs:1" in job.result["bleu_signature"]
        assert Path(job.result["hyp"]).is_file() and Path(job.result["checkpoint"]).is_file()
        assert job.result["parameters"] > 0 and job.progress["update"] == 10
        assert job.progress["processes"] == 2 and job.attempts == 1
        run = Path(job.out_dir)
        starts = [e for e in _events(run) if e["event"] == "start"]
        assert [s["world"] for s in starts] == [2]
        assert _gone(_rank_pids(run))

        over = {"config": "configs/tiny.yaml", "resources": {"processes": 3}}
        r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"spec": over})
        assert r.status_code == 422
        assert "the largest live training worker owns 2 device(s)" in r.json()["detail"]
        cli = env.cli("submit", "train", str(env.root / "configs" / "tiny.yaml"),
                      "--processes", "3", check=False)  # fmt: skip
        assert cli.returncode == 2 and len(cli.stderr.strip().splitlines()) == 1
        assert "owns 2 device(s)" in cli.stderr
        bad = env.cli("submit", "train", str(env.root / "configs" / "tiny.yaml"),
                      "--processes", "0", check=False)  # fmt: skip
        assert bad.returncode == 2 and "resources.processes" in bad.stderr


def test_a_killed_rank_fails_the_job_and_frees_the_worker(over_redis: Env) -> None:
    """kill -9 of rank 1: torchrun ends rank 0, the job fails in seconds saying which rank,
    its checkpoints stay; the same worker then takes the next 2-process job, whose
    cancellation stops both ranks at one update with a resume point."""
    env = over_redis
    env.vars["SYNATTN_DDP_TIMEOUT_S"] = "30"
    job_id = _submit(env, "configs/long.yaml", "--processes", "2")
    _ddp_worker(env)
    job = env.wait(job_id, {"running"}, timeout=180, update=6)
    run = Path(job.out_dir)
    pids = _rank_pids(run)
    assert len(pids) == 2
    os.kill(pids[1], signal.SIGKILL)
    t0 = time.monotonic()
    job = env.wait(job_id, {"failed", "succeeded", "cancelled"}, timeout=90)
    assert job.state == "failed" and time.monotonic() - t0 < 60
    assert "the 2-process job failed" in job.error and "rank 1:" in job.error
    assert _gone(pids) and list((run / "checkpoints").glob("ckpt-*.pt"))

    second = _submit(env, "configs/long.yaml", "--processes", "2")
    job = env.wait(second, {"running"}, timeout=180, update=3)
    run = Path(job.out_dir)
    pids = _rank_pids(run)
    env.cli("cancel", second)
    job = env.wait(second, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.state == "cancelled", job.error
    assert _gone(pids)
    assert (run / "checkpoints" / "resume.pt").is_file()
    ends = [e for e in _events(run) if e["event"] == "end"]
    assert [e["stopped"] for e in ends] == ["cancelled"]
    assert ends[0]["update"] >= job.progress["update"]


def test_a_worker_killed_mid_job_takes_its_ranks_and_the_job_resumes(over_redis: Env) -> None:
    """kill -9 of the worker: torchrun and both ranks die with it (nothing trains on in the
    run folder), the reaper requeues the job, and the next worker resumes it under torchrun
    from the newest checkpoint."""
    env = over_redis
    job_id = _submit(env, "configs/mid.yaml", "--processes", "2")
    _ddp_worker(env)
    job = env.wait(job_id, {"running"}, timeout=180, update=12)
    run = Path(job.out_dir)
    pids = _rank_pids(run)
    first = env.workers[0]
    torchrun = [c.pid for c in psutil.Process(first.pid).children()]
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert _gone(pids + torchrun)
    # the ranks may finish an update or two while torchrun ends them; nothing after that
    killed_at = max(e["update"] for e in _events(run) if e["event"] == "update")
    assert killed_at < 40
    env.worker("train")
    job = env.wait(job_id, {"succeeded", "failed"}, timeout=240)
    assert job.state == "succeeded", job.error
    assert job.attempts == 2 and job.result["update"] == 40
    events = _events(run)
    starts = [e for e in events if e["event"] == "start"]
    assert [(s["resumed"], s["world"]) for s in starts] == [(False, 2), (True, 2)]
    assert 5 <= starts[1]["update"] <= killed_at  # from the last checkpoint, not from zero
    assert [e["update"] for e in events if e["event"] == "end"] == [40]


# ------------------------------------------------------------------ no processes from here on


def test_the_dispatcher_counts_processes_and_fits_devices(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")

    def job(owner: str, processes: int) -> str:
        return store.create_job("train", f"{owner}-{processes}", {}, "/tmp/x", owner=owner,
                                processes=processes).id  # fmt: skip

    store.register_worker("one", "train", 1, devices=1)
    store.register_worker("two", "train", 1, devices=2)
    big, b1, b2 = job("alice", 2), job("bob", 1), job("bob", 1)
    # alice's (older) 2-process job takes the 2-device slot, bob's the 1-device one
    assert store.release_next("train", 0, 60, None) == [big, b1]
    assert store.live_devices("train", 60) == 2 and store.live_devices("parse", 60) is None
    store.register_worker("three", "train", 2, devices=1)
    big2, a1 = job("alice", 2), job("alice", 1)
    # bob holds 1 process, alice 2: bob's next first; then alice's 2-process job fits no free
    # slot, and her 1-process one takes the last (backfill)
    assert store.release_next("train", 0, 60, None) == [b2, a1]
    assert store.get(big2).released_at is None  # waits for a 2-device slot
    # the queue's order counts processes too: alice's 2-process job weighs two of bob's
    rows = [("a", "alice", 0, 1.0, 2), ("a2", "alice", 0, 2.0, 1), ("b", "bob", 0, 3.0, 1),
            ("b2", "bob", 0, 4.0, 1), ("b3", "bob", 0, 5.0, 1)]  # fmt: skip
    assert fair_order(rows, {}, {}) == ["a", "b", "b2", "a2", "b3"]


def test_the_running_quota_counts_processes(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    store.register_worker("w", "train", 3, devices=2)
    ids = [store.create_job("train", f"j{k}", {}, "/x", owner="u", processes=2).id
           for k in range(2)]  # fmt: skip
    one = store.create_job("train", "one", {}, "/x", owner="u").id
    assert store.release_next("train", 0, 60, 3) == [ids[0], one]  # 2 + 1 processes: full


def test_submit_refuses_jobs_no_worker_could_run(data_root: Path, tmp_path: Path) -> None:
    settings = JobSettings(home=tmp_path, data_root=data_root, max_processes=4)
    store = JobStore(settings.database_url)
    spec = TrainJobSpec.model_validate(
        {"config": "configs/tiny.yaml", "resources": {"processes": 4}, "evaluate": None}
    )

    def res(processes: int, nodes: int = 1) -> Resources:
        return Resources(processes=processes, nodes=nodes)

    check_processes(store, settings, res(4), "u")  # nobody registered: up to the cap
    with pytest.raises(BadJobSpec, match="at most 4 processes per node"):
        check_processes(store, settings, res(5), "u")
    # the cap is per node: 2 nodes of 4 are what a 4-process machine allows (Slurm)
    check_processes(store, settings, res(8, nodes=2), "u")
    with pytest.raises(BadJobSpec, match="10: 5 on each of 2 nodes; a job may have at most 4"):
        check_processes(store, settings, res(10, nodes=2), "u")
    store.register_worker("w", "train", 1, devices=2)
    with pytest.raises(BadJobSpec, match="no worker can run it"):
        submit_train(store, settings, spec, owner="u")
    assert store.jobs() == []
    check_processes(store, settings, res(2), "u")
    store.set_quota("u", None, 1)
    with pytest.raises(BadJobSpec, match="user u may run at most 1 processes"):
        check_processes(store, settings, res(2), "u")
    check_processes(store, settings, res(1), "u")  # one process is never refused here
    # a one-process spec is stored as before (no resources key): digests do not move
    assert "resources" not in TrainJobSpec(config="x").model_dump(mode="json")


def test_a_gpu_worker_hands_a_job_its_first_devices() -> None:
    assert device_env(2, {}, 0) == {}  # CPU: gloo processes, nothing to pin
    assert device_env(2, {}, 4) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert device_env(2, {"CUDA_VISIBLE_DEVICES": "3, 5,7"}, 3) == {"CUDA_VISIBLE_DEVICES": "3,5"}
    with pytest.raises(ValueError, match="needs 3 GPUs"):
        device_env(3, {"CUDA_VISIBLE_DEVICES": "3,5"}, 2)


def test_a_grid_asks_for_processes_for_every_job() -> None:
    grid = ExperimentSpec(name="g", config="c.yaml", variants=["vanilla", "dea"],
                          resources={"processes": 2})  # fmt: skip
    assert {j["spec"].resources.processes for j in grid.expand(10)} == {2}
    assert grid.model_dump(mode="json")["resources"] == {"processes": 2}
    with pytest.raises(ValueError, match="at most 16 processes per node"):
        TrainJobSpec.model_validate({"config": "c.yaml", "resources": {"processes": 17}})
    with pytest.raises(ValueError, match="less than or equal to 256"):  # 16 nodes of 16
        TrainJobSpec.model_validate({"config": "c.yaml", "resources": {"processes": 257}})


TETHERED = """
import subprocess, sys, os, time
child = subprocess.Popen([sys.executable, "-m", "synattn_jobs.tether", str(os.getpid()), "KILL",
                          "sleep", "60"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_tethered_process_dies_with_its_parent() -> None:
    """What keeps torchrun (and its ranks) from outliving a worker killed with -9."""
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", TETHERED], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 20
    while psutil.Process(child).name() != "sleep":  # tied to the parent, then exec'd
        assert time.monotonic() < deadline
        time.sleep(0.05)
    parent.kill()
    parent.wait()
    assert _gone([child], timeout=10)
