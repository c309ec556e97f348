"""The ranks of a multi-node job: ``srun`` starts one ``torchrun`` per node of the allocation,
which meet by torchrun's c10d rendezvous on the first node (``--rdzv-id``: the Slurm job)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from synattn_jobs.slurm import commands

RDZV_PORT_BASE = 29400  # plus the Slurm job id modulo 1000: jobs sharing a node differ


def rendezvous(environ: Mapping[str, str]) -> tuple[str, int]:
    """The first node's address and the rendezvous port of this allocation."""
    nodelist = environ.get("SLURM_JOB_NODELIST")
    job = environ.get("SLURM_JOB_ID")
    if not nodelist or not job:
        raise RuntimeError("a multi-node job runs inside a Slurm allocation (no SLURM_JOB_ID)")
    first = commands.hostnames(nodelist)[0]
    return commands.node_address(first), RDZV_PORT_BASE + int(job) % 1000


def multi_node_command(
    nodes: int, per_node: int, job_file: Path, environ: Mapping[str, str] | None = None
) -> list[str]:
    """``srun`` of torchrun on every node: ``srun`` tied to this process, each node's
    torchrun to its Slurm task, and the ranks to their torchrun (``tether``)."""
    environ = os.environ if environ is None else environ
    host, port = rendezvous(environ)
    return [
        sys.executable, "-m", "synattn_jobs.tether", str(os.getpid()), "TERM",
        "srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
        "--kill-on-bad-exit=1", "--export=ALL",
        sys.executable, "-m", "synattn_jobs.tether", "parent", "TERM",
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
        "--nproc_per_node", str(per_node), "--rdzv_backend", "c10d",
        "--rdzv_endpoint", f"{host}:{port}", "--rdzv_id", environ["SLURM_JOB_ID"],
        "--max-restarts", "0", "-m", "synattn_jobs.ddp_rank", str(job_file),
    ]  # fmt: skip
