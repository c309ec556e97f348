"""The Slurm executor against a real Slurm (two virtual nodes on this machine): a grid with
the Celery executor's report, what Slurm would refuse, and jobs of several processes and
nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.jobs.conftest import Env
from tests.slurm.conftest import SlurmEnv
from tests.slurm.helpers import events, model, settled

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
    jobs = [settled(slurm, j.stdout.strip(), {"succeeded", "failed", "cancelled"}, 240)
            for j in (one, two)]  # fmt: skip
    for job in jobs:
        assert job.state == "succeeded", job.error
        assert job.result["update"] == 10 and job.result["stopped"] == "max_updates"
        assert Path(job.result["hyp"]).is_file() and job.progress["processes"] == 2
        starts = [e for e in events(Path(job.out_dir)) if e["event"] == "start"]
        assert [s["world"] for s in starts] == [2]
    torchrun = (Path(jobs[1].out_dir) / "ddp" / "torchrun.log").read_text()
    nodes = {line.split()[-1] for line in torchrun.splitlines() if "synattn-node" in line}
    assert nodes == {"n1", "n2"}, torchrun[-2000:]
    a, b = model(jobs[0].result["checkpoint"]), model(jobs[1].result["checkpoint"])
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_a_parse_job_runs_in_the_parse_partition(slurm: SlurmEnv) -> None:
    """Parse jobs are Slurm jobs too, in a partition of their own
    (``SYNATTN_SLURM_PARSE_PARTITION``), with Slurm's output beside no dataset."""
    import subprocess

    slurm.vars["SYNATTN_SLURM_PARSE_PARTITION"] = "parse"
    src = slurm.root / f"slurm-parse-{slurm.home.parent.name}.en"
    src.write_text("A dog runs .\nTwo men play chess in a park .\n", encoding="utf-8")
    out = slurm.root / "parsed" / f"slurm-{slurm.home.parent.name}"
    job_id = slurm.cli("submit", "parse", "--src", str(src), "--out", str(out),
                       "--rows-per-shard", "1").stdout.strip()  # fmt: skip
    slurm_job = slurm.slurm_job(job_id)
    ask = ["squeue", "-h", "--states=all", "-j", slurm_job, "-o", "%P"]
    part = subprocess.run(ask, env=slurm.env, capture_output=True, text=True).stdout.strip()
    assert part == "parse"
    job = settled(slurm, job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job.state == "succeeded", job.error
    assert job.result["rows"] == 2 and (out / "manifest.json").is_file()
    assert not (out / "slurm").exists()
    assert list((slurm.root / "runs" / "slurm" / job_id).glob(f"slurm-{slurm_job}.out"))
