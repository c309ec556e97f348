"""Slurm's command-line tools, called with a timeout, their output parsed by pure functions.

Every call goes through ``slurm``: a missing tool or a refusal is a ``SlurmError`` carrying
Slurm's own message, never a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

CALL_TIMEOUT_S = 30.0
SQUEUE_FORMAT = "%A|%T|%r|%N"


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is what Slurm said."""


@dataclass(frozen=True)
class SlurmJob:
    """What Slurm says of one job: its state (``PENDING``, ``RUNNING``, ``TIMEOUT``, ...), the
    reason it waits or ended (``Priority``, ``Resources``, ``NonZeroExitCode``), its nodes and
    exit code (``0:0``) where known."""

    id: str
    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: str = ""


def slurm(args: list[str], stdin: str | None = None, timeout: float = CALL_TIMEOUT_S) -> str:
    """Run a Slurm tool; its standard output, or ``SlurmError`` with its message."""
    exe = shutil.which(args[0])
    if exe is None:
        raise SlurmError(
            f"{args[0]} is not installed here: the Slurm executor submits from a machine with "
            "Slurm's client tools (sbatch, squeue, scontrol, scancel) and its slurm.conf"
        )
    try:
        proc = subprocess.run(
            [exe, *args[1:]], input=stdin, capture_output=True, text=True, timeout=timeout,
            env=os.environ,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{args[0]} did not answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        said = " ".join((proc.stderr.strip() or proc.stdout.strip()).split())
        raise SlurmError(said or f"{args[0]} exited with status {proc.returncode}")
    return proc.stdout


def sbatch(script: str, options: list[str], test_only: bool = False) -> str:
    """Submit ``script`` with ``options``; the Slurm job id (``--test-only``: Slurm's estimate
    of when and where it would start, nothing submitted)."""
    if test_only:
        return slurm(["sbatch", "--test-only", *options], stdin=script).strip()
    out = slurm(["sbatch", "--parsable", *options], stdin=script).strip()
    return out.split(";", 1)[0]  # --parsable: "ID" or "ID;CLUSTER"


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """``squeue -h -o '%A|%T|%r|%N'`` lines as jobs by id."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0]:
            reason = "" if parts[2] in ("None", "(null)") else parts[2]
            jobs[parts[0]] = SlurmJob(parts[0], parts[1], reason, parts[3])
    return jobs


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o ID``'s one line as its fields (``JobState``, ``Reason``, ...)."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def parse_sacct(text: str) -> SlurmJob | None:
    """The job's own line of ``sacct -n -P -o JobID,State,ExitCode,NodeList`` (not its
    steps'); ``CANCELLED by 0`` reads ``CANCELLED``."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and "." not in parts[0]:
            state = parts[1].split()[0] if parts[1] else ""
            return SlurmJob(parts[0], state, "", parts[3] if len(parts) > 3 else "", parts[2])
    return None


def queued(ids: list[str]) -> dict[str, SlurmJob]:
    """The jobs among ``ids`` that ``squeue`` still lists (pending, running, or ended a short
    while ago); one call for all of them."""
    if not ids:
        return {}
    try:
        out = slurm(["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT])
    except SlurmError as exc:
        if "Invalid job id" in str(exc):  # every id has left squeue
            return {}
        raise
    return parse_squeue(out)


def finished(job_id: str) -> SlurmJob | None:
    """A job ``squeue`` no longer lists: from ``scontrol show job`` (kept ``MinJobAge``
    seconds after it ends), else from accounting (``sacct``) where the cluster has it; None
    when Slurm no longer knows it."""
    try:
        f = parse_scontrol(slurm(["scontrol", "show", "job", "-o", job_id]))
        if f.get("JobState"):
            reason = "" if f.get("Reason") in (None, "None", "(null)") else f["Reason"]
            return SlurmJob(job_id, f["JobState"], reason, f.get("NodeList", ""),
                            f.get("ExitCode", ""))  # fmt: skip
    except SlurmError:
        pass
    try:
        out = slurm(["sacct", "-n", "-P", "-X", "-j", job_id, "-o",
                     "JobID,State,ExitCode,NodeList"])  # fmt: skip
    except SlurmError:  # accounting disabled, or no such job
        return None
    return parse_sacct(out)


def look_up(ids: list[str]) -> dict[str, SlurmJob | None]:
    """Slurm's view of each job id (None: Slurm no longer knows it)."""
    seen: dict[str, SlurmJob | None] = dict(queued(ids))
    for job_id in ids:
        if job_id not in seen:
            seen[job_id] = finished(job_id)
    return seen


def scancel(job_id: str, signal: str | None = None, batch_only: bool = False) -> None:
    """``scancel`` the job; with ``signal``, only send it (``--batch``: to the batch step, the
    synattn process, which then stops at its next update and saves)."""
    args = ["scancel"]
    if signal:
        args += [f"--signal={signal}"]
    if batch_only:
        args += ["--batch"]
    slurm([*args, job_id])


def requeue(job_id: str) -> None:
    """Put a running job back in Slurm's queue (``scontrol requeue``); same job id."""
    slurm(["scontrol", "requeue", job_id])


def hostnames(nodelist: str) -> list[str]:
    """``n[1-2]`` expanded by ``scontrol show hostnames``."""
    return slurm(["scontrol", "show", "hostnames", nodelist]).split()


def node_address(node: str) -> str:
    """A node's address (``NodeAddr``), which may differ from its name."""
    f = parse_scontrol(slurm(["scontrol", "show", "node", "-o", node]))
    return f.get("NodeAddr") or node
