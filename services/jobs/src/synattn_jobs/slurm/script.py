"""A synattn job as Slurm sees it: its ``sbatch`` options and its batch script (pure).

The service's settings (``SYNATTN_SLURM_*``) give partition, account, QOS, time limit,
memory and GPUs; a job's or a grid's ``resources.slurm`` overrides the first five. The script
exports the job store's and the data root's settings, so the job finds them wherever the
service runs, and runs ``python -m synattn_jobs.slurm.batch JOB``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from synattn_jobs.settings import JobSettings
from synattn_jobs.specs import Resources, SlurmRequest

# settings a job's process must share with the service (the rest come from its environment)
SHARED_SETTINGS = ("home", "database_url", "broker_url", "data_root", "runs_dir")


def request(settings: JobSettings, kind: str, own: SlurmRequest | None) -> SlurmRequest:
    """The Slurm request of a job: its own values over the service's settings."""
    base = SlurmRequest(
        partition=(settings.slurm_parse_partition or settings.slurm_partition)
        if kind == "parse" else settings.slurm_partition,
        account=settings.slurm_account, qos=settings.slurm_qos, time=settings.slurm_time,
        mem=settings.slurm_mem,
    )  # fmt: skip
    if own is None:
        return base
    return base.model_copy(update=own.model_dump(exclude_none=True))


def sbatch_options(
    settings: JobSettings, kind: str, resources: Resources, name: str, log_dir: Path,
    cpus: int = 1,
) -> list[str]:  # fmt: skip
    """``sbatch`` options of a job: one task per node, its processes' CPUs and GPUs, a signal
    ``slurm_signal_s`` before the time limit (to the batch step: synattn's process), and
    requeue allowed."""
    req = request(settings, kind, resources.slurm)
    per_node = resources.per_node
    opts = [
        f"--job-name={name}", f"--output={log_dir}/slurm-%j.out", "--open-mode=append",
        f"--nodes={resources.nodes}", "--ntasks-per-node=1",
        f"--cpus-per-task={max(cpus, per_node * settings.slurm_cpus_per_process)}",
        f"--signal=B:USR1@{settings.slurm_signal_s}", "--requeue", "--export=ALL",
        f"--chdir={settings.data_root}",
    ]  # fmt: skip
    for flag, value in (("partition", req.partition), ("account", req.account),
                        ("qos", req.qos), ("time", req.time), ("mem", req.mem)):  # fmt: skip
        if value:
            opts.append(f"--{flag}={value}")
    if settings.slurm_gpus_per_node and kind == "train":
        opts.append(f"--gpus-per-node={per_node}")
    return [*opts, *settings.slurm_extra]


def gpu_problem(settings: JobSettings, resources: Resources) -> str | None:
    """Why a job cannot fit a node's GPUs, or None."""
    have = settings.slurm_gpus_per_node
    if have and resources.per_node > have:
        return (f"resources: {resources.per_node} processes per node, but a node has {have} "
                "GPUs (SYNATTN_SLURM_GPUS_PER_NODE): ask for more nodes")  # fmt: skip
    return None


def batch_script(settings: JobSettings, job_id: str) -> str:
    """The batch script: the shared settings exported, then synattn's batch step (``exec``,
    so that Slurm's signals reach it)."""
    python = settings.slurm_python or sys.executable
    lines = ["#!/bin/bash", f"# synattn job {job_id}: {settings.runs_dir}"]
    for key in SHARED_SETTINGS:
        value = getattr(settings, key)
        if value:
            lines.append(f"export SYNATTN_{key.upper()}={shlex.quote(str(value))}")
    lines += [
        "export SYNATTN_EXECUTOR=slurm",
        f"exec {shlex.quote(python)} -m synattn_jobs.slurm.batch {shlex.quote(job_id)}",
    ]
    return "\n".join(lines) + "\n"


def probe_script() -> str:
    """What ``sbatch --test-only`` is given: it reads the options, never runs the script."""
    return "#!/bin/bash\ntrue\n"
