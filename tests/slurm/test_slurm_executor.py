"""The Slurm executor against a real Slurm (two virtual nodes on this machine): grids,
refusals, cancel and resubmit, requeue, time limits, multi-process and multi-node jobs, a
node that dies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.jobs.conftest import Env
from tests.slurm.conftest import SlurmEnv

pytestmark = pytest.mark.integration


def _grid(root: Path, name: str) -> Path:
    grid = root / "configs" / f"grid-{name}.yaml"
    grid.write_text(yaml.safe_dump({
        "name": name, "config": "tiny.yaml", "baseline": "vanilla",
        "variants": ["vanilla", "dea"], "seeds": [1], "evaluate": {"split": "valid"},
    }), encoding="utf-8")  # fmt: skip
    return grid


ROW_KEYS = ("bleu_by_seed", "chrf_mean", "parameters", "protocol", "delta", "verdict", "runs")


def _rows(report: Path) -> dict[str, dict]:
    rows = json.loads((report / "report.json").read_text())["rows"]
    return {r["variant"]: {k: r[k] for k in ROW_KEYS} for r in rows}


def _outcomes(env: Env) -> dict[str, tuple]:
    """Each run's validation loss, update count and translations."""
    return {
        j.name: (j.result["best_valid_loss"], j.result["update"],
                 Path(j.result["hyp"]).read_text())
        for j in env.store().jobs()
    }  # fmt: skip


def test_a_grid_runs_through_slurm_with_the_celery_executors_report(
    slurm: SlurmEnv, embedded: Env, tmp_path: Path
) -> None:
    """Two training jobs of a grid become two Slurm jobs, submitted at once; both succeed and
    the report equals the one the same grid gets from synattn's own worker."""
    name = f"sl-{tmp_path.name}"[:40]
    proc = slurm.cli("experiment", "run", str(_grid(slurm.root, name)), "--wait",
                     "--report-dir", str(tmp_path / "slurm-report"), timeout=300,
                     check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + slurm.logs()
    jobs = list(slurm.store().jobs())
    assert len(jobs) == 2 and all(j.state == "succeeded" for j in jobs)
    assert len({j.slurm_job for j in jobs}) == 2 and all(j.slurm_job for j in jobs)
    for j in jobs:
        log = Path(j.out_dir) / "slurm" / f"slurm-{j.slurm_job}.out"
        assert f"synattn job {j.id}" in log.read_text()
    ref = embedded.cli("experiment", "run", str(_grid(embedded.root, name + "-c")), "--wait",
                       "--embedded-worker", "--report-dir", str(tmp_path / "celery-report"),
                       timeout=300)  # fmt: skip
    assert ref.returncode == 0
    assert _rows(tmp_path / "slurm-report") == _rows(tmp_path / "celery-report")
    assert _outcomes(slurm) == _outcomes(embedded)


def _model(path: str | Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def _events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _config(slurm: SlurmEnv, name: str, **train: object) -> Path:
    from tests.jobs.conftest import tiny_yaml
    from tests.trainer.conftest import m30k  # noqa: F401

    base = yaml.safe_load((slurm.root / "configs" / "tiny.yaml").read_text())
    base["train"].update(train)
    path = slurm.root / "configs" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(base), encoding="utf-8")
    assert tiny_yaml  # the base config is tiny.yaml's (tests.jobs.conftest.tiny_yaml)
    return path


def test_what_slurm_would_refuse_is_refused_at_submit_with_its_message(
    slurm: SlurmEnv,
) -> None:
    """An unknown partition, or a time limit above the partition's, is refused by Slurm's
    own words (sbatch --test-only), from the CLI and the job API; nothing is stored and
    nothing reaches Slurm's queue. Options outside Slurm's syntax never reach sbatch."""
    import httpx

    from tests.jobs.conftest import h, serving

    cfg = str(slurm.root / "configs" / "tiny.yaml")
    bad = slurm.cli("submit", "train", cfg, "--partition", "nope", check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "Slurm refused the job" in bad.stderr and "invalid partition" in bad.stderr.lower()
    long = slurm.cli("submit", "train", cfg, "--time-limit", "2:00:00", check=False)
    assert long.returncode == 2 and "Slurm refused the job" in long.stderr, long.stderr
    assert "time limit" in long.stderr.lower()
    odd = slurm.cli("submit", "train", cfg, "--partition", "debug --uid=0", check=False)
    assert odd.returncode == 2 and "resources.slurm.partition" in odd.stderr
    with serving(slurm) as (base, token, _):
        for slurm_req, said in (({"partition": "nope"}, "invalid partition"),
                                ({"account": "x;y"}, "string should match")):  # fmt: skip
            spec = {"config": "configs/tiny.yaml", "resources": {"slurm": slurm_req}}
            r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"spec": spec})
            assert r.status_code == 422, r.text
            assert said in json.dumps(r.json()).lower()
    assert list(slurm.store().jobs()) == []


def test_cancel_and_scancel_keep_a_resume_point_and_a_resubmission_resumes(
    slurm: SlurmEnv,
) -> None:
    """``synattn cancel`` of a running job stops it at its next update with a resume point
    (SIGTERM to its batch step); the same job submitted with ``--out`` resumes from it; a
    plain ``scancel`` from Slurm's side cancels it too, and the next resubmission finishes
    the run."""
    cfg = str(_config(slurm, "slurm-cancel", max_updates=300, checkpoint_every_updates=50,
                      average_last=1, average_window=0.2))  # fmt: skip
    first = slurm.cli("submit", "train", cfg, "--name", "cancelled").stdout.strip()
    job = slurm.wait(first, {"running"}, timeout=120, update=3)
    run = Path(job.out_dir)
    slurm.cli("cancel", first)
    job = slurm.wait(first, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert job.state == "cancelled", job.error
    assert (run / "checkpoints" / "resume.pt").is_file()
    stopped = [e["update"] for e in _events(run) if e["event"] == "end"]

    again = slurm.cli("submit", "train", cfg, "--out", str(run)).stdout.strip()
    job = slurm.wait(again, {"running"}, timeout=120, update=stopped[0] + 2)
    import subprocess

    subprocess.run(["scancel", job.slurm_job], env=slurm.env, check=True)
    job = _settled(slurm, again, {"cancelled", "failed", "succeeded"})
    assert job.state == "cancelled" and "cancelled in Slurm" in (job.error or ""), job.error

    last = slurm.cli("submit", "train", cfg, "--out", str(run)).stdout.strip()
    job = _settled(slurm, last, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert job.state == "succeeded", job.error
    starts = [e for e in _events(run) if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True, True]
    assert starts[1]["update"] == stopped[0] and job.result["update"] == 300


def _settled(slurm: SlurmEnv, job_id: str, states: set[str], timeout: float = 90):
    """Wait for ``states`` while reconciling as the job API would (``synattn slurm sync``)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        slurm.cli("slurm", "sync")
        job = slurm.store().get(job_id)
        if job is not None and job.state in states:
            return job
        time.sleep(1)
    job = slurm.store().get(job_id)
    raise AssertionError(f"{job_id}: {job and job.state} {job and job.error}\n{slurm.logs()}")


def test_a_requeued_job_resumes_to_the_parameters_of_an_uninterrupted_run(
    slurm: SlurmEnv,
) -> None:
    """``scontrol requeue`` mid-training (as an admin or a preemption would): the run saves,
    waits in the queue, starts again and resumes exactly: its final model equals that of
    the same job run without interruption beside it."""
    import subprocess

    import torch

    cfg = str(_config(slurm, "slurm-requeue", max_updates=80, checkpoint_every_updates=20,
                      average_last=2, average_window=0.5))  # fmt: skip
    moved = slurm.cli("submit", "train", cfg, "--name", "requeued").stdout.strip()
    still = slurm.cli("submit", "train", cfg, "--name", "uninterrupted").stdout.strip()
    job = slurm.wait(moved, {"running"}, timeout=120, update=25)
    subprocess.run(["scontrol", "requeue", job.slurm_job], env=slurm.env, check=True)
    slurm.release_begin_time(job.slurm_job)
    done = _settled(slurm, moved, {"succeeded", "failed", "cancelled"}, timeout=240)
    ref = _settled(slurm, still, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert done.state == ref.state == "succeeded", (done.error, ref.error)
    starts = [e for e in _events(Path(done.out_dir)) if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True] and starts[1]["update"] >= 20
    assert done.attempts == 2 and done.slurm_job == job.slurm_job  # Slurm's requeue: same id
    a, b = _model(done.result["checkpoint"]), _model(ref.result["checkpoint"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_two_processes_on_one_node_and_one_on_each_of_two_nodes_train_alike(
    slurm: SlurmEnv,
) -> None:
    """A 2-process job on one node (torchrun in the allocation) and a 2-node job of one
    process per node (srun, torchrun's c10d rendezvous on the first node, gloo) both finish
    with a one-process job's result, and the same world size and global batch give the same
    parameters, within the DDP tests' tolerance."""
    import torch

    cfg = str(slurm.root / "configs" / "tiny.yaml")
    one = slurm.cli("submit", "train", cfg, "--processes", "2", "--name", "one-node")
    two = slurm.cli("submit", "train", cfg, "--processes", "2", "--nodes", "2", "--name",
                    "two-nodes")  # fmt: skip
    jobs = [_settled(slurm, j.stdout.strip(), {"succeeded", "failed", "cancelled"}, 240)
            for j in (one, two)]  # fmt: skip
    for job in jobs:
        assert job.state == "succeeded", job.error
        assert job.result["update"] == 10 and job.result["stopped"] == "max_updates"
        assert Path(job.result["hyp"]).is_file() and job.progress["processes"] == 2
        starts = [e for e in _events(Path(job.out_dir)) if e["event"] == "start"]
        assert [s["world"] for s in starts] == [2]
    torchrun = (Path(jobs[1].out_dir) / "ddp" / "torchrun.log").read_text()
    nodes = {line.split()[-1] for line in torchrun.splitlines() if "synattn-node" in line}
    assert nodes == {"n1", "n2"}, torchrun[-2000:]
    a, b = _model(jobs[0].result["checkpoint"]), _model(jobs[1].result["checkpoint"])
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_a_job_reaching_its_time_limit_is_signalled_checkpointed_requeued_and_finished(
    slurm: SlurmEnv,
) -> None:
    """A 1-minute time limit with the signal 55 s before it: Slurm sends SIGUSR1 within the
    first half minute, the run saves at its next update, goes back to queued and asks Slurm
    to requeue it (same Slurm job id). The cluster's admin then lifts the limit, and the job
    resumes from where it stopped and finishes."""
    import subprocess

    slurm.vars["SYNATTN_SLURM_SIGNAL_S"] = "55"
    cfg = str(_config(slurm, "slurm-limit", max_updates=1000, checkpoint_every_updates=100,
                      average_last=2, average_window=0.5))  # fmt: skip
    job_id = slurm.cli("submit", "train", cfg, "--time-limit", "1").stdout.strip()
    slurm_job = slurm.slurm_job(job_id)
    slurm.release_begin_time(slurm_job, timeout=90)  # requeued by the job itself
    subprocess.run(["scontrol", "update", f"jobid={slurm_job}", "TimeLimit=10"],
                   env=slurm.env, check=True)  # fmt: skip
    job = _settled(slurm, job_id, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert job.state == "succeeded", job.error
    assert job.slurm_job == slurm_job and job.attempts == 2 and job.result["update"] == 1000
    run = Path(job.out_dir)
    ends = [e for e in _events(run) if e["event"] == "end"]
    starts = [e for e in _events(run) if e["event"] == "start"]
    assert [e["stopped"] for e in ends] == ["cancelled", "max_updates"]  # stopped, then done
    # it goes on from where it stopped (a signal before its first update: from update 0)
    assert starts[1]["update"] == ends[0]["update"]
    assert starts[1]["resumed"] or ends[0]["update"] == 0
    log = (run / "slurm" / f"slurm-{slurm_job}.out").read_text()
    assert "time limit is near; checkpointed and requeued in Slurm" in log, log[-2000:]
    assert "Slurm restart 1" in log


def test_a_node_that_dies_under_a_job_is_noticed_and_the_job_resumes_elsewhere(
    slurm: SlurmEnv, slurm_conf: Path
) -> None:
    """slurmd of the job's node and the job's processes killed (-9), as a node losing power:
    within seconds (the heartbeat's staleness, 3 s here) the reconciler notices the silent
    job, cancels its Slurm job and submits it anew away from that node; it resumes on the
    other node from its checkpoint. Never left running."""
    import os
    import signal
    import time

    import psutil

    from tests.slurm.conftest import SLURM_DIR

    job_id = slurm.cli("submit", "train", str(slurm.root / "configs" / "long.yaml")).stdout.strip()
    job = slurm.wait(job_id, {"running"}, timeout=120, update=12)
    node = slurm.squeue(job.slurm_job) and _node_of(slurm, job.slurm_job)
    batch = [p for p in psutil.process_iter(["cmdline"])
             if p.info["cmdline"] and "synattn_jobs.slurm.batch" in p.info["cmdline"]
             and job_id in p.info["cmdline"]]  # fmt: skip
    assert len(batch) == 1
    daemon = int((SLURM_DIR / f"slurmd-{node}.pid").read_text())
    stepd = batch[0].parent()
    for proc in (daemon, stepd.pid, batch[0].pid):
        os.kill(proc, signal.SIGKILL)
    lost_at, first = time.monotonic(), job.slurm_job
    while time.monotonic() - lost_at < 30:
        slurm.cli("slurm", "sync")
        job = slurm.store().get(job_id)
        if job.state != "running":
            break
        time.sleep(0.5)
    assert job.state == "queued" and time.monotonic() - lost_at < 30, (job.state, job.error)
    assert job.slurm_job != first and f"not on {node}" in job.error, job.error
    assert "stopped beating" in job.error
    resumed = slurm.wait(job_id, {"running"}, timeout=120, update=job.progress["update"] + 2)
    assert _node_of(slurm, resumed.slurm_job) != node
    starts = [e for e in _events(Path(job.out_dir)) if e["event"] == "start"]
    assert [s["resumed"] for s in starts] == [False, True] and starts[1]["update"] >= 10


def _node_of(slurm: SlurmEnv, slurm_job: str) -> str:
    import subprocess

    out = subprocess.run(["squeue", "-h", "-j", slurm_job, "-o", "%N"], env=slurm.env,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()
