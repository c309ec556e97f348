"""A real Slurm for the executor's tests: the two-node cluster of
``deploy/slurm/local-cluster.sh`` (munge, slurmctld, slurmd -N n1 and n2 on this machine),
started by ``.ci/services.sh`` or here, and a job queue whose executor is Slurm."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jobs.conftest import Env, data_root, embedded, m30k  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "deploy" / "slurm" / "local-cluster.sh"
SLURM_DIR = Path(os.environ.get("SYNATTN_SLURM_DIR", "/tmp/synattn-slurm"))


def _nodes_up(conf: Path) -> int:
    out = subprocess.run(
        ["sinfo", "-h", "-p", "debug", "-t", "idle,mix,alloc", "-o", "%D"],
        env={**os.environ, "SLURM_CONF": str(conf)}, capture_output=True, text=True,
    )  # fmt: skip
    return sum(int(x) for x in out.stdout.split() if x.isdigit()) if out.returncode == 0 else 0


@pytest.fixture(scope="session")
def slurm_conf() -> Path:
    """The local cluster's ``slurm.conf`` with both nodes up (brought up here when down)."""
    conf = SLURM_DIR / "slurm.conf"
    if not (conf.is_file() and _nodes_up(conf) >= 2):
        if os.geteuid() != 0:
            reason = "a local Slurm cluster (deploy/slurm/local-cluster.sh up, as root)"
            if os.environ.get("CI"):
                pytest.fail(f"the Slurm tests need {reason}")
            pytest.skip(f"needs {reason}")
        proc = subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"could not start the local Slurm cluster: {proc.stderr[-2000:]}")
    os.environ["SLURM_CONF"] = str(conf)
    return conf


class SlurmEnv(Env):
    """A job queue whose executor is the local Slurm (embedded SQLite store: every node is
    this machine, so the store file is shared as a cluster's shared file system would)."""

    def squeue(self, slurm_job: str) -> tuple[str, str]:
        out = subprocess.run(["squeue", "-h", "--states=all", "-j", slurm_job, "-o", "%T|%r"],
                             env=self.env, capture_output=True, text=True)  # fmt: skip
        state, _, reason = out.stdout.strip().partition("|")
        return state, reason

    def slurm_job(self, job_id: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.store().get(job_id)
            if job is not None and job.slurm_job:
                return job.slurm_job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} has no Slurm job")

    def release_begin_time(self, slurm_job: str, timeout: float = 60) -> None:
        """A requeued Slurm job waits 120 s (BeginTime) before it may start again; as the
        cluster's admin the test lets it start now, on another node than the one it ran on:
        that node refuses the same job for a while after it was killed (its credential is
        revoked), which is what the 120 s are for."""
        deadline = time.monotonic() + timeout
        ran_on = ""
        while time.monotonic() < deadline:
            state, reason = self.squeue(slurm_job)
            if state == "RUNNING":
                ran_on = self.node(slurm_job) or ran_on
            if state == "PENDING" and reason == "BeginTime":
                update = ["scontrol", "update", f"jobid={slurm_job}", "StartTime=now"]
                if ran_on:
                    update.append(f"ExcNodeList={ran_on}")
                subprocess.run(update, env=self.env, check=True)
                return
            time.sleep(0.3)
        raise AssertionError(f"Slurm job {slurm_job} never waited for its BeginTime")

    def node(self, slurm_job: str) -> str:
        out = subprocess.run(["squeue", "-h", "-j", slurm_job, "-o", "%N"], env=self.env,
                             capture_output=True, text=True)  # fmt: skip
        return out.stdout.strip()

    def logs(self) -> str:
        texts = [p.read_text(errors="replace")[-3000:]
                 for p in sorted(self.root.glob("runs/**/slurm-*.out"))]  # fmt: skip
        return "\n".join(texts)


@pytest.fixture
def slurm(slurm_conf: Path, data_root: Path, tmp_path: Path) -> Iterator[SlurmEnv]:  # noqa: F811
    """A job queue with ``SYNATTN_EXECUTOR=slurm`` on the local cluster; its Slurm jobs are
    cancelled afterwards."""
    home = tmp_path / "slurm-home"
    home.mkdir()
    env = SlurmEnv(data_root, home, f"sqla+sqlite:///{home / 'broker.sqlite'}")
    env.vars.update({
        "SYNATTN_EXECUTOR": "slurm", "SYNATTN_SLURM_PARTITION": "debug",
        "SLURM_CONF": str(slurm_conf),
    })  # fmt: skip
    yield env
    for job in env.store().jobs():
        if job.slurm_job:
            subprocess.run(["scancel", job.slurm_job], env=env.env, capture_output=True)
    # a test that killed a node's slurmd: the script starts what is not running and resumes
    # the node (nothing to do, and fast, otherwise)
    subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True)
